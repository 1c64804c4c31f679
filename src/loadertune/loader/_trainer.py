"""Hugging Face ``Trainer``'s loader from an exported ``best_loader.yaml``: the
``TrainingArguments`` keys under which Trainer builds the loader loadertune measured.

Trainer builds its training loader itself, from ``TrainingArguments`` (the ``dataloader_*``
keys, ``per_device_train_batch_size``, ``train_sampling_strategy``), and hands it to Accelerate,
which gives each process its share. Its collate is the ``data_collator`` given to ``Trainer``,
and it seeds the workers with a ``worker_init_fn`` of its own: a file naming either says what
no ``TrainingArguments`` key can, and is refused naming the key unless the caller says it
passes that to Trainer itself. Settings tuned at another batch size or for another number of
ranks per node are refused too: ``num_workers`` is per rank, and what kept one batch size fed
says little of another. Nothing here imports ``transformers``: the keys are plain values.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from loadertune.checks import check_worker_count
from loadertune.errors import ConfigError
from loadertune.loader._build import (
    TUNED_FOR,
    LoaderSource,
    dataloader_kwargs,
    effective_settings,
    read_loader_yaml,
    tuned_for,
)

if TYPE_CHECKING:
    import torch

TRAINER_KEYS: Mapping[str, str] = {
    "batch_size": "per_device_train_batch_size",
    "num_workers": "dataloader_num_workers",
    "prefetch_factor": "dataloader_prefetch_factor",
    "pin_memory": "dataloader_pin_memory",
    "persistent_workers": "dataloader_persistent_workers",
    "multiprocessing_context": "dataloader_multiprocessing_context",
    "drop_last": "dataloader_drop_last",
    "shuffle": "train_sampling_strategy",
    "non_blocking": "accelerator_config",
}
"""Each loader key and the ``TrainingArguments`` key that says it to Trainer."""

NOT_TRAINING_ARGUMENTS: Mapping[str, str] = {
    "collate_fn": "is Trainer's data_collator, a Trainer argument, not a TrainingArguments key",
    "worker_init_fn": "has no TrainingArguments key: Trainer seeds its workers with a "
    "worker_init_fn of its own",
}
"""Loader keys no ``TrainingArguments`` key expresses, and why."""

LOCAL_RANKS = "LOCAL_WORLD_SIZE"
"""The ranks on this node, as ``torchrun`` and ``accelerate launch`` set it."""


def trainer_arguments(
    source: LoaderSource,
    *,
    per_device_train_batch_size: int | None = None,
    nproc_per_node: int | None = None,
    passed_to_trainer: Collection[str] = (),
    device: torch.device | str | None = None,
) -> dict[str, Any]:
    """The ``TrainingArguments`` keys for the loader ``source`` describes.

    ``TrainingArguments(output_dir=..., **trainer_arguments("best_loader.yaml"))`` makes Trainer
    build the loader loadertune measured: the same batch size per device, workers, prefetch,
    pinning (only where there is an accelerator, as :func:`build_dataloader` applies it),
    persistent workers, start method, ``drop_last``, shuffling and non-blocking copies.

    Args:
        source: the path of a ``best_loader.yaml``, or its settings (a mapping, an OmegaConf
            node or a ``LoaderConfig``).
        per_device_train_batch_size: the batch size per device the training will use, checked
            against the one the settings were tuned at (None: train at that one).
        nproc_per_node: the ranks per node the training runs (None: ``LOCAL_WORLD_SIZE``,
            which ``torchrun`` and ``accelerate launch`` set, else 1), checked against the
            ``nproc_per_node`` the settings were tuned for.
        passed_to_trainer: loader keys you give Trainer yourself (``collate_fn`` as
            ``Trainer(data_collator=...)``; ``worker_init_fn`` through a Trainer subclass),
            left out instead of refused.
        device: where batches go, deciding ``pin_memory`` (None: CUDA if available).

    Raises:
        ConfigError: naming the key: settings PyTorch or the command line would refuse, a key
            no ``TrainingArguments`` key expresses, another batch size per device, or another
            number of ranks per node.
    """
    where = str(source) if isinstance(source, str | os.PathLike) else "the loader settings given"
    settings = read_loader_yaml(source) if isinstance(source, str | os.PathLike) else source
    tuned = tuned_for(settings, where)
    loader = effective_settings(settings, device)
    check_worker_count(loader, tuned)
    for key, why in NOT_TRAINING_ARGUMENTS.items():
        value = getattr(loader, key)
        if value is not None and key not in passed_to_trainer:
            raise ConfigError(key, value, f"in {where} {why}", _fix(key, where))
    _check_batch_size(loader.batch_size, per_device_train_batch_size, where)
    _check_ranks(tuned, nproc_per_node, where)
    kwargs = dataloader_kwargs(loader)
    arguments = {
        TRAINER_KEYS[key]: kwargs.get(key)
        for key in ("batch_size", "num_workers", "pin_memory", "drop_last", "prefetch_factor")
    }
    arguments |= {
        "dataloader_persistent_workers": bool(kwargs.get("persistent_workers", False)),
        "dataloader_multiprocessing_context": kwargs.get("multiprocessing_context"),
        "train_sampling_strategy": "random" if loader.shuffle else "sequential",
    }
    if loader.non_blocking:  # Trainer's default is off; Accelerate makes the copies
        arguments["accelerator_config"] = {"non_blocking": True}
    return arguments


def _fix(key: str, where: str) -> str:
    """How to go on with a file naming ``key``, which no ``TrainingArguments`` key says."""
    given = f"and call trainer_arguments(..., passed_to_trainer=['{key}'])"
    if key == "collate_fn":
        return f"pass that callable as Trainer(data_collator=...) {given}"
    return (
        f"remove worker_init_fn from {where} if seeding workers is all it does (Trainer "
        f"seeds them), or override Trainer.get_train_dataloader to use it {given}"
    )


def _check_batch_size(tuned: int | None, training: int | None, where: str) -> None:
    """Refuse training at another batch size per device than the settings were tuned at."""
    if training is None or training == tuned:
        return
    raise ConfigError(
        "per_device_train_batch_size", training, f"differs from batch_size={tuned} that the "
        f"settings in {where} were tuned at (workers and prefetch that fed one batch size "
        "may starve or waste another)",
        f"tune again at that size (loadertune -m loader.batch_size={training}), or train at "
        f"per_device_train_batch_size={tuned}",
    )  # fmt: skip


def _check_ranks(tuned: int, training: int | None, where: str) -> None:
    """Refuse training on another number of ranks per node than the settings were tuned for."""
    ranks = training if training is not None else int(os.environ.get(LOCAL_RANKS, "1"))
    if ranks == tuned:
        return
    raise ConfigError(
        TUNED_FOR, tuned, f"the settings in {where} were tuned for {tuned} rank(s) per node "
        f"and this training runs {ranks}: num_workers is per rank, and the node's CPUs are "
        "shared by all of them",
        f"tune again with loadertune -m trial.nproc_per_node={ranks}",
    )  # fmt: skip
