"""Whether each rank reads its own share: the check made before an epoch under several ranks.

Lightning injects a ``DistributedSampler`` into the loaders it is given, Accelerate's
``prepare`` shards their batch sampler, and a plain ``torchrun`` script passes its own
sampler; a loader that none of them sharded reads every sample on every rank, which trains
on each sample ``world`` times an epoch and says nothing. The loaders loadertune builds
(``AutoLoader``, and ``build_dataloader``'s :class:`RankCheckedDataLoader`) look when an
epoch starts, not when they are built: the frameworks shard after building.
"""

from __future__ import annotations

import warnings
from typing import Any

from torch.utils.data import DataLoader, IterableDataset

from loadertune._lazy import dist


def world_size() -> int:
    """The ranks of an initialised default process group (1 outside one)."""
    if dist.is_available() and dist.is_initialized():
        return int(dist.get_world_size())
    return 1


def unsharded(loader: Any, world: int) -> str:
    """Why ``loader`` reads the whole dataset on each of ``world`` ranks, or "".

    A batch sampler that says its ``batch_size`` and yields about one rank's share of the
    dataset or less is sharded (``DistributedSampler``, Accelerate's ``BatchSamplerShard``,
    the user's own); one that yields (nearly) every sample is not. A stream shards itself,
    and a batch sampler that does not say its batch size cannot be judged: neither is named.
    """
    if world <= 1 or isinstance(loader.dataset, IterableDataset):
        return ""
    batches = loader.batch_sampler
    size = getattr(batches, "batch_size", None)
    if not size:
        return ""
    try:
        total, covered = len(loader.dataset), len(batches) * size
    except TypeError:
        return ""
    if covered < total - size + 1:
        return ""
    return (
        f"loadertune: this {type(loader).__name__} runs on {world} ranks and every rank reads "
        f"all {total} samples (its sampler, a {type(_index_sampler(loader)).__name__}, is not "
        "sharded), so each sample trains once per rank per epoch. Fix: pass "
        "sampler=DistributedSampler(dataset) (build_dataloader(..., shard=True) adds it), or "
        "hand the loader to Lightning's Trainer or to accelerate's prepare, which shard it"
    )


def _index_sampler(loader: Any) -> Any:
    batches = loader.batch_sampler
    return getattr(batches, "sampler", batches)


def warn_if_unsharded(loader: Any) -> None:
    """Warn once per loader (at its first epoch under several ranks) when it is unsharded."""
    if getattr(loader, "_rank_checked", False):
        return
    world = world_size()
    if world <= 1:
        return
    object.__setattr__(loader, "_rank_checked", True)
    why = unsharded(loader, world)
    if why:
        warnings.warn(why, UserWarning, stacklevel=3)


class RankCheckedDataLoader(DataLoader):  # type: ignore[type-arg]
    """A ``DataLoader`` that warns, at its first epoch under several ranks, when no sampler
    shards it. Otherwise exactly a ``DataLoader``: the frameworks re-create it through
    ``DataLoader``'s own signature."""

    def __iter__(self) -> Any:
        warn_if_unsharded(self)
        return super().__iter__()
