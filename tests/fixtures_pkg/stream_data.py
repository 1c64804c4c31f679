"""A user's own sharded ``IterableDataset``, split by worker as the PyTorch docs show."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import IterableDataset, get_worker_info


class ShardedVectors(IterableDataset[tuple[torch.Tensor, int]]):
    """``n_shards`` shards of ``per_shard`` random vectors; worker ``w`` of ``k`` reads shards
    ``w, w + k, ...``, so with more workers than shards some read none. Declares its shard
    count as ``n_shards`` (loadertune's protocol for a user's own iterable) unless
    ``declare`` is false."""

    def __init__(
        self, n_shards: int = 4, per_shard: int = 64, dim: int = 8, declare: bool = True
    ) -> None:
        self.shard_total = n_shards
        if declare:
            self.n_shards = n_shards
        self.per_shard = per_shard
        self.dim = dim
        self.num_classes = 2

    def __iter__(self) -> Iterator[tuple[torch.Tensor, int]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        for shard in range(worker, self.shard_total, workers):
            for i in range(self.per_shard):
                index = shard * self.per_shard + i
                g = torch.Generator().manual_seed(index)
                yield torch.randn(self.dim, generator=g), index % self.num_classes


class SampleSplitVectors(ShardedVectors):
    """The same samples, dealt out one by one across workers (no worker goes empty)."""

    split_by = "sample"

    def __iter__(self) -> Iterator[tuple[torch.Tensor, int]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        for index in range(worker, self.shard_total * self.per_shard, workers):
            g = torch.Generator().manual_seed(index)
            yield torch.randn(self.dim, generator=g), index % self.num_classes


class SlowStart(ShardedVectors):
    """The same stream, whose first item of each pass takes ``first_item_s`` seconds (a
    remote stream listing its shards, a shuffle buffer filling) in every process reading it."""

    def __init__(self, first_item_s: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.first_item_s = first_item_s

    def __iter__(self) -> Iterator[tuple[torch.Tensor, int]]:
        time.sleep(self.first_item_s)
        yield from super().__iter__()
