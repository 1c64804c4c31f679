"""The one place that builds a ``torch.utils.data.DataLoader``.

Trials and a user's own training code build their loaders here, so a tuned config means the
same thing in both. PyTorch's rules are applied rather than left to fail late: no
``prefetch_factor``, ``persistent_workers`` or ``multiprocessing_context`` without workers, and
``pin_memory`` only where there is an accelerator to pin for (elsewhere it only warns).
``collate_fn`` and ``worker_init_fn`` are dotted paths, resolved here, so an exported
``best_loader.yaml`` rebuilds the same loader; a file can name anything, so only the user's
own modules and PyTorch's collates are resolved unless the caller trusts more (``trust=``).
:func:`to_device` moves whatever the collate returns; ``pin_memory`` pins the same structures
(PyTorch pins tensors inside mappings, named tuples, tuples and sequences, and calls
``pin_memory()`` on objects that have one).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from loadertune import loader as loader_rooms  # each room imported on first use
from loadertune._lazy import dist, torch, torch_data
from loadertune.checks import check_worker_count, loader_callables, validate_loader
from loadertune.config import LoaderConfig, structured
from loadertune.config import _torch_rules as torch_rules
from loadertune.errors import ConfigError

if TYPE_CHECKING:
    from torch.utils.data import DataLoader, Dataset

    from loadertune.checks import Trust

ALWAYS = ("batch_size", "num_workers", "pin_memory", "shuffle", "drop_last")
"""``DataLoader`` arguments passed with or without workers (``non_blocking`` is for the copy)."""


TUNED_FOR = "nproc_per_node"
"""The key of ``best_loader.yaml`` that says for how many ranks per node it was tuned (the
settings are per rank); absent means one."""


LoaderSource = LoaderConfig | Mapping[str, Any] | str | os.PathLike[str]
"""What :func:`build_dataloader` takes: settings, or the path of a ``best_loader.yaml``."""


def loader_config(cfg: LoaderSource) -> LoaderConfig:
    """Accept a :class:`LoaderConfig`, a dict, an OmegaConf node, or the path of a
    ``best_loader.yaml``; anything else, or no settings at all, is one line naming the fix."""
    if isinstance(cfg, LoaderConfig):
        return cfg

    if isinstance(cfg, str | os.PathLike):
        cfg = read_loader_yaml(cfg)  # its nproc_per_node checked, naming the file
    _check_settings(cfg, "loader", "the loader settings given")
    tuned_for(cfg)  # a value that is no count of ranks is refused, not dropped
    settings = {k: v for k, v in dict(cfg).items() if k != TUNED_FOR}
    return structured("loader", LoaderConfig, settings)  # type: ignore[no-any-return]


def tuned_for(
    cfg: LoaderConfig | Mapping[str, Any], where: str = "the loader settings given"
) -> int:
    """The ranks per node ``cfg`` was tuned for (``nproc_per_node`` in it, else 1).

    Raises:
        ConfigError: naming ``nproc_per_node`` and ``where`` it was read: not an integer, or
            not from 1 to this node's CPUs (no node runs more ranks than it has CPUs).
    """
    if isinstance(cfg, LoaderConfig):
        return 1
    value = dict(cfg).get(TUNED_FOR)
    if value is None:
        return 1
    cpus = os.cpu_count() or 1
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= cpus:
        return value
    raise ConfigError(
        TUNED_FOR, value, f"in {where} must be the ranks per node the settings were tuned "
        f"for, an integer from 1 to this node's {cpus} CPUs",
        f"set it in {where} to the trial.nproc_per_node the sweep ran with, or remove it "
        "for one rank",
    )  # fmt: skip


def read_loader_yaml(path: str | os.PathLike[str], key: str = "loader") -> dict[str, Any]:
    """The settings in a ``best_loader.yaml`` (or ``conf/loader/best.yaml``), read safely;
    a file that is missing, not YAML, empty or not a mapping is one line naming the file."""
    where = Path(path)
    fix = (
        f"export it again (run the sweep, or AutoLoader with export=), or remove {where} and "
        "use loader=default"
    )
    try:
        data = yaml.safe_load(where.read_text())
    except OSError as exc:
        raise ConfigError(key, where, f"cannot be read ({exc.strerror or exc})", fix) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ConfigError(key, where, f"is not valid YAML ({problem}{at})", fix) from None
    _check_settings(data, key, str(where), fix)
    tuned_for(data, str(where))
    return dict(data)


def _check_settings(data: object, key: str, what: str, fix: str = "") -> None:
    """Refuse loader settings that are not a non-empty mapping of ``loader.*`` keys."""
    fix = fix or "pass a mapping of loader keys (batch_size, num_workers, ...), or LoaderConfig()"
    if data is None or (isinstance(data, Mapping) and not data):
        raise ConfigError(key, what, "holds no loader settings (empty)", fix)
    if not isinstance(data, Mapping):
        listed = isinstance(data, Sequence) and not isinstance(data, str)
        kind = "a list" if listed else f"a {type(data).__name__}"
        raise ConfigError(key, what, f"is {kind}, not a mapping of loader keys", fix)


def accelerator_available(device: torch.device | str | None = None) -> bool:
    """True when batches will be copied to an accelerator that pinned memory speeds up."""
    if device is None:
        return torch.cuda.is_available()
    return torch.device(device).type in ("cuda", "xpu")


def effective_settings(cfg: LoaderSource, device: torch.device | str | None = None) -> LoaderConfig:
    """The settings that actually take effect: a no-op ``pin_memory`` is recorded as off."""
    loader = loader_config(cfg)
    validate_loader(loader)
    pin = loader.pin_memory and accelerator_available(device)
    return dataclasses.replace(loader, pin_memory=pin, non_blocking=loader.non_blocking and pin)


def dataloader_kwargs(loader: LoaderConfig) -> dict[str, Any]:
    """Keyword arguments for ``DataLoader``, leaving out what PyTorch forbids without workers."""
    settings = dataclasses.asdict(loader)
    kwargs = {key: settings[key] for key in ALWAYS}
    if loader.num_workers > 0:
        kwargs |= {
            key: value
            for key, value in settings.items()
            if torch_rules.needs_workers(key) and value is not None
        }
    return kwargs


def build_dataloader(
    dataset: Dataset[Any],
    loader_cfg: LoaderSource,
    device: torch.device | str | None = None,
    *,
    trust: Trust = False,
    shard: bool = False,
    **extra: Any,
) -> DataLoader[Any]:
    """Build the DataLoader that ``loader_cfg`` describes, the way loadertune measured it.

    As a ``DataLoader``, it takes the sampler it is given and adds none unless asked
    (``shard=True``): Lightning's ``Trainer`` and Accelerate's ``prepare`` shard the loaders
    they are handed, and a second sampler would halve each rank's share. Built without a
    sampler of the caller's, it is a :class:`~loadertune.loader._sharding.RankCheckedDataLoader`,
    whose first epoch under several ranks warns when nothing sharded it.

    Args:
        dataset: any map-style dataset, or an ``IterableDataset`` (no sampler; its own
            ``__iter__`` splits the shards by rank and worker, and shuffles if it does).
        loader_cfg: a :class:`LoaderConfig`, a dict or an OmegaConf node with its keys,
            or the path of ``loadertune``'s ``best_loader.yaml`` (read and checked here).
        device: where batches go; ``pin_memory`` is applied only for an accelerator.
            ``None`` means CUDA if available.
        trust: which ``collate_fn``/``worker_init_fn`` paths the config may name: by
            default callables defined in your own modules (not the standard library's,
            loadertune's or an installed package's, such as ``os.system``, even when reached
            as ``mypkg.os.system``) and PyTorch's ``default_collate`` and ``default_convert``
            (not the rest of ``torch``); a list of exact names, or of prefixes
            of where the code is defined, to allow more; True for any (a file you trust).
        shard: give this rank its share with a ``DistributedSampler`` (call its
            ``set_epoch(epoch)``), in a plain ``torchrun`` script, not under a framework.
        **extra: passed to ``DataLoader`` unchanged (``sampler``, ``generator``...); a
            ``collate_fn`` or ``worker_init_fn`` given here wins over the config's path.

    Raises:
        ConfigError: for settings PyTorch would reject, a tuned file's ``num_workers``
            the command line would refuse or ``nproc_per_node`` that is no count of ranks,
            a ``collate_fn`` or ``worker_init_fn`` path that does not import or is not
            trusted, or ``shard`` beside a sampler of the caller's, naming the key and the fix.
    """
    tuned = isinstance(loader_cfg, str | os.PathLike) or TUNED_FOR in _keys(loader_cfg)
    if isinstance(loader_cfg, str | os.PathLike):
        loader_cfg = read_loader_yaml(loader_cfg)  # once: the settings and the ranks tuned for
    effective = effective_settings(loader_cfg, device)
    if tuned:  # a tuned file's workers, capped as the command line caps them
        check_worker_count(effective, tuned_for(loader_cfg))
    kwargs = dataloader_kwargs(effective) | loader_callables(effective, trust)
    own = "sampler" in extra or "batch_sampler" in extra  # the caller's order and share
    if not own and tuned and not _streams(dataset):  # a tuned file's, not a hand-written dict
        _check_tuned_for(tuned_for(loader_cfg))
    if shard:
        extra = {**extra, "sampler": _rank_sampler(dataset, effective, extra)}
    kwargs = _ordered(kwargs, dataset, extra) | extra
    return (torch_data.DataLoader if own else loader_rooms.RankCheckedDataLoader)(dataset, **kwargs)


def _ordered(kwargs: dict[str, Any], dataset: Any, extra: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` less what the order given leaves out: a stream orders and splits (and
    shuffles) itself; a sampler replaces ``shuffle``, a batch sampler the batch size too."""
    given = "sampler" in extra or "batch_sampler" in extra
    drop = {"shuffle"} if given or _streams(dataset) else set()
    if "batch_sampler" in extra:
        drop |= {"batch_size", "drop_last"}
    return {k: v for k, v in kwargs.items() if k not in drop}


def _keys(cfg: LoaderSource) -> list[str]:
    """The keys of settings given as a mapping (none for a ``LoaderConfig`` or a path)."""
    return list(cfg) if isinstance(cfg, Mapping) else []


def _streams(dataset: Any) -> bool:
    """True for an ``IterableDataset``, which a DataLoader gives no sampler and no shuffle."""
    return isinstance(dataset, torch_data.IterableDataset)


def _rank_sampler(dataset: Any, loader: LoaderConfig, extra: Mapping[str, Any]) -> Any:
    """This rank's ``DistributedSampler`` (rank and world from the process group), asked for
    with ``shard=True``; refused beside the caller's own sampler or outside a process group."""
    if "sampler" in extra or "batch_sampler" in extra:
        raise ConfigError(
            "shard", True, "adds a DistributedSampler, and a sampler was passed too",
            "pass shard=True or your own sampler (already sharded), not both",
        )  # fmt: skip
    if not (dist.is_available() and dist.is_initialized()):
        raise ConfigError(
            "shard", True, "needs an initialised torch.distributed process group",
            "call torch.distributed.init_process_group() first (torchrun sets its variables)",
        )  # fmt: skip
    return torch_data.DistributedSampler(
        dataset, shuffle=loader.shuffle, drop_last=loader.drop_last
    )


def _check_tuned_for(tuned: int) -> None:
    """Under a process group, say when the settings were tuned for another number of ranks
    per node (a loader given a sampler of the caller's is a trial's rank, or knows)."""
    if dist.is_available() and dist.is_initialized():
        world = dist.get_world_size()
        if world != tuned:
            warnings.warn(
                f"loadertune: these loader settings were tuned for {tuned} rank(s) per node "
                f"({TUNED_FOR}={tuned}) and run on {world}: num_workers is per rank, so tune "
                f"again with trial.nproc_per_node={world}",
                stacklevel=3,
            )


def to_device(batch: Any, device: torch.device | str, non_blocking: bool = False) -> Any:
    """``batch`` with every tensor in it on ``device``: tuples, lists and dicts, nested.

    Containers keep their type (named tuples and dict subclasses included, where they can be
    rebuilt from their items); anything that is neither a tensor nor a container (strings,
    numbers, None) is returned as it is.
    """
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, Mapping):
        moved = {k: to_device(v, device, non_blocking) for k, v in batch.items()}
        kind: Any = type(batch)
        try:
            return kind(moved)
        except TypeError:
            return moved
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a named tuple
        return type(batch)(*(to_device(v, device, non_blocking) for v in batch))
    if isinstance(batch, list | tuple):
        return type(batch)(to_device(v, device, non_blocking) for v in batch)
    return batch


def tensors_in(batch: Any) -> list[Any]:
    """The tensors inside ``batch``, however nested (for counting the bytes copied)."""
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, Mapping):
        batch = list(batch.values())
    if isinstance(batch, list | tuple):
        return [t for v in batch for t in tensors_in(v)]
    return []


def loader_yaml(settings: dict[str, Any], header: list[str]) -> str:
    """``best_loader.yaml``: the loader group's keys, with where they came from as comments.

    Written by a sweep's verdict and by ``AutoLoader``'s export alike, read back by
    ``loader=best`` and :func:`build_dataloader`.
    """
    lines = [f"# {h}" for h in header]
    for key, value in settings.items():
        if value is None:
            text = "null"
        elif isinstance(value, bool):
            text = str(value).lower()
        else:
            text = str(value)
        lines.append(f"{key}: {text}")
    return "\n".join(lines) + "\n"
