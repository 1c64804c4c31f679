"""Iterable datasets in a trial: told apart from map-style ones, sampled, and counted per worker.

An ``IterableDataset`` has no length and no index: a DataLoader gives it no sampler, and each
worker runs the dataset's own ``__iter__`` (which splits the shards by ``get_worker_info()``).
A trial therefore reads its first items by iterating, and wraps the dataset in a
:class:`WorkerTally` so that a worker that yielded nothing (more workers than shards) is
seen and named instead of silently costing a process.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import IterableDataset, get_worker_info

__all__ = ["WorkerTally", "first_items", "is_iterable", "stream_figures", "unwrapped"]

TALLY_EVERY = 64
"""Items a worker yields between writes of its count (its first item is always written)."""


def is_iterable(dataset: Any) -> bool:
    """True for a ``torch.utils.data.IterableDataset`` (what a DataLoader streams, unsampled)."""
    return isinstance(dataset, IterableDataset)


def unwrapped(dataset: Any) -> Any:
    """The user's dataset inside a :class:`WorkerTally`, or ``dataset`` itself."""
    return dataset.__dict__["dataset"] if isinstance(dataset, WorkerTally) else dataset


def stream_figures(
    dataset: Any, reopened: int, num_workers: int
) -> tuple[dict[str, float], list[int]]:
    """An iterable's figures after a window: ``window_reopens`` (passes opened inside it) and
    ``idle_workers`` (how many yielded nothing), and those workers' ids; nothing for a
    map-style dataset."""
    if not is_iterable(dataset):
        return {}, []
    idle = dataset.idle() if isinstance(dataset, WorkerTally) and num_workers else []
    return {"window_reopens": float(reopened), "idle_workers": float(len(idle))}, idle


def first_items(dataset: Any, count: int) -> list[Any]:
    """Up to ``count`` items from the start of one pass, read in this process (no workers)."""
    stream = iter(dataset)
    try:
        return list(itertools.islice(stream, count))
    finally:
        close = getattr(stream, "close", None)
        if callable(close):
            close()


class WorkerTally(IterableDataset[Any]):
    """``dataset`` as it is, with the items each worker yielded counted in shared memory.

    The counts live in a shared tensor, so they survive the workers (forked or spawned) and
    add up over epochs. Attributes are read from and written to the wrapped dataset, so a
    ``worker_init_fn`` that sets ``get_worker_info().dataset.start`` still reaches it.
    """

    def __init__(self, dataset: Any, num_workers: int) -> None:
        object.__setattr__(self, "dataset", dataset)
        counts = torch.zeros(max(num_workers, 1), dtype=torch.int64)
        counts.share_memory_()  # type: ignore[no-untyped-call]
        object.__setattr__(self, "counts", counts)

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        slot = info.id if info is not None else 0
        counts = self.counts
        base = int(counts[slot])
        n = 0
        try:
            for item in self.dataset:
                n += 1
                if n == 1 or n % TALLY_EVERY == 0:
                    counts[slot] = base + n
                yield item
        finally:
            counts[slot] = base + n

    def idle(self) -> list[int]:
        """The workers (by id) that yielded no item so far."""
        return [i for i, n in enumerate(self.counts.tolist()) if n == 0]

    def yielded(self) -> list[int]:
        """Items each worker (by id) yielded so far."""
        return [int(n) for n in self.counts.tolist()]

    def __getattr__(self, name: str) -> Any:
        if name in ("dataset", "counts"):  # not set yet (while unpickling)
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("dataset", "counts"):
            object.__setattr__(self, name, value)
        else:
            setattr(self.dataset, name, value)

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            object.__setattr__(self, key, value)
