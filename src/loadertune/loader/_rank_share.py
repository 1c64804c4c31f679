"""A rank's share of a trial's index stream, cut the way ``DistributedSampler`` cuts a dataset."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from loadertune._lazy import torch_data

if TYPE_CHECKING:
    from torch.utils.data import DistributedSampler


class RankShare:
    """The indices of ``stream`` at the positions ``DistributedSampler`` gives ``rank``.

    The stream (back-to-back passes over the dataset, :func:`~loadertune.measure._steady_state.
    stream_sampler`) is the same on every rank (same seed); PyTorch's ``DistributedSampler``
    over its positions, unshuffled, gives each rank every ``world``-th one, so the ranks'
    shares are disjoint and equal in length, as in training.
    """

    def __init__(self, stream: Iterable[int], rank: int, world: int) -> None:
        self.stream = stream
        length = len(stream)  # type: ignore[arg-type]
        self.positions: DistributedSampler[int] = torch_data.DistributedSampler(
            range(length),  # type: ignore[arg-type]
            num_replicas=world,
            rank=rank,
            shuffle=False,
            drop_last=True,
        )

    def __len__(self) -> int:
        return len(self.positions)

    def __iter__(self) -> Iterator[int]:
        indices = list(self.stream)
        return (int(indices[p]) for p in self.positions)
