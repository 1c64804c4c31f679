"""AutoLoader inside Hugging Face ``Trainer``: a Trainer whose training loader tunes itself.

Trainer builds its training loader from ``TrainingArguments`` and hands it to Accelerate,
which would re-create an AutoLoader as a plain ``DataLoader`` (see :func:`prepare_autoloader`).
:class:`AutoLoaderTrainer` lets Trainer build and prepare its loader as always (its sampler,
its ``data_collator`` with the unused columns removed, its worker seeding, each process's
share), then puts an AutoLoader over that share, with the same collate and ``worker_init_fn``,
inside the prepared loader. Its checkpoints carry each rank's tuning
(``autoloader_rank<r>.pt`` beside Trainer's files); a run resumed from one takes it back (a
run that had settled does not tune again) and starts the resumed epoch after the batches
Trainer counts as trained, so each sample is still delivered once an epoch.

This module imports ``transformers``: ``import loadertune`` does not import it.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from loadertune.autoloader._loader import AutoLoader
from loadertune.errors import ConfigError

STATE_FILE = "autoloader_rank{rank}.pt"
"""Each rank's AutoLoader state in a Trainer checkpoint folder (``state_dict()`` is per rank)."""

TRAINERS_OWN: Mapping[str, str] = {
    "dataset": "pass train_dataset to the Trainer",
    "batch_size": "set TrainingArguments(per_device_train_batch_size=...)",
    "shuffle": "set TrainingArguments(train_sampling_strategy=...)",
    "sampler": "Trainer chooses the sampler; override _get_train_sampler to change it",
    "batch_sampler": "Trainer chooses the sampler; override _get_train_sampler to change it",
    "collate_fn": "pass data_collator to the Trainer",
    "drop_last": "set TrainingArguments(dataloader_drop_last=...)",
    "worker_init_fn": "Trainer seeds the workers itself",
    "generator": "set TrainingArguments(seed=...) or data_seed",
    "multiprocessing_context": "set TrainingArguments(dataloader_multiprocessing_context=...)",
    "device": "Trainer places the batches on TrainingArguments' device",
}
"""AutoLoader arguments Trainer decides itself, and where to say them instead."""


def checked_arguments(given: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``autoloader=`` arguments, refusing one Trainer decides itself (naming the key
    and where Trainer takes it) before anything is built."""
    arguments = dict(given or {})
    for key, fix in TRAINERS_OWN.items():
        if key in arguments:
            raise ConfigError(f"autoloader.{key}", arguments[key], "is Trainer's to set", fix)
    return arguments


def checkpoint_folder(resume_from_checkpoint: Any, output_dir: str | None) -> Path | None:
    """The checkpoint ``Trainer.train(resume_from_checkpoint=...)`` resumes from, as Trainer
    resolves it (True: the last one in ``output_dir``), or None for a fresh run."""
    if resume_from_checkpoint is None or resume_from_checkpoint is False:
        return None
    if resume_from_checkpoint is True:
        last = get_last_checkpoint(output_dir) if output_dir else None  # type: ignore[no-untyped-call]
        return Path(last) if last else None  # Trainer itself refuses a missing one
    return Path(resume_from_checkpoint)


class AutoLoaderTrainer(transformers.Trainer):
    """A ``transformers.Trainer`` whose training loader is an AutoLoader, tuning inside the run.

    Use it as ``Trainer``; ``autoloader`` takes AutoLoader's own arguments (``tune_steps``,
    ``max_workers``, ``export``, ``track``, ``candidates``, ...; ``num_workers``,
    ``prefetch_factor``, ``persistent_workers`` or ``pin_memory`` given there stay fixed).
    The ``dataloader_*`` loader settings of ``TrainingArguments`` are what the AutoLoader
    tunes, so they do not apply to the training loader; the evaluation loaders are Trainer's.
    After ``train()``, :attr:`autoloader` is the AutoLoader (``settings``, ``decision``,
    ``report()``).
    """

    def __init__(self, *args: Any, autoloader: Mapping[str, Any] | None = None, **kwargs: Any):
        self.autoloader_arguments = checked_arguments(autoloader)
        self.autoloader: AutoLoader | None = None
        self._resume_from: Path | None = None
        super().__init__(*args, **kwargs)
        self.add_callback(KeepTuning())

    def train(self, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        """Trainer's ``train``, noting the checkpoint it resumes from for the loader's tuning."""
        self._resume_from = checkpoint_folder(resume_from_checkpoint, self.args.output_dir)
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def get_train_dataloader(self) -> Any:
        """Trainer's prepared training loader with an AutoLoader over this process's share."""
        prepared: Any = super().get_train_dataloader()  # Accelerate's DataLoaderShard
        plain = prepared.base_dataloader  # Accelerate's plain loader over this process's share
        loader = AutoLoader(
            plain.dataset, batch_sampler=plain.batch_sampler, collate_fn=plain.collate_fn,
            worker_init_fn=plain.worker_init_fn, generator=plain.generator,
            multiprocessing_context=plain.multiprocessing_context, device=self.args.device,
            **self.autoloader_arguments,
        )  # fmt: skip
        loader.shuffle = self.args.train_sampling_strategy == "random"  # as exported
        if self._resume_from is not None:
            _take_tuning_back(loader, self._resume_from / STATE_FILE.format(rank=self._rank))
        prepared.base_dataloader = loader
        self.autoloader = loader
        return prepared

    def get_resumed_dataloader(self, dataloader: Any, num_batches: int) -> Any:
        """The same loader, its next epoch starting after the ``num_batches`` Trainer trained
        (Accelerate's ``skip_first_batches`` would re-create a plain, untuned loader)."""
        loader = getattr(dataloader, "base_dataloader", None)
        if not isinstance(loader, AutoLoader):
            return super().get_resumed_dataloader(dataloader, num_batches)
        loader.skip_batches(num_batches)
        return dataloader

    @property
    def _rank(self) -> int:
        return int(self.args.process_index)


def _take_tuning_back(loader: AutoLoader, path: Path) -> None:
    """Load a checkpoint's tuning into ``loader``; without one (a checkpoint written by a plain
    Trainer, or for other ranks), warn and tune again."""
    if not path.is_file():
        warnings.warn(
            f"{path}: no AutoLoader state in the checkpoint (written by a plain Trainer, or "
            "by fewer ranks); the loader tunes again",
            stacklevel=3,
        )
        return
    loader.load_tuning(torch.load(path, weights_only=True))


class KeepTuning(transformers.TrainerCallback):
    """Write each rank's AutoLoader state into every checkpoint Trainer saves."""

    def on_save(
        self,
        args: transformers.TrainingArguments,
        state: transformers.TrainerState,
        control: transformers.TrainerControl,
        train_dataloader: Any = None,
        **kwargs: Any,
    ) -> None:
        loader = getattr(train_dataloader, "base_dataloader", None)
        if not isinstance(loader, AutoLoader):
            return
        folder = Path(args.output_dir or ".") / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        folder.mkdir(parents=True, exist_ok=True)  # another rank may not have written it yet
        torch.save(loader.state_dict(), folder / STATE_FILE.format(rank=args.process_index))
