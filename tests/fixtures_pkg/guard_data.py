"""A dataset for the trial's guards: items whose many small leaves each need a shared-memory file.

Each item is ``(vector, label, [width floats])``. PyTorch's collate turns the list into
``width`` small tensors that are *not* created in shared memory; the worker's queue feeder
thread moves each into a ``/dev/shm`` file of its own (a page at least) as it sends the batch.
On a small ``/dev/shm``, or under a low ``RLIMIT_NOFILE`` (each file is sent as a descriptor),
that fails in the feeder thread, which prints the error and drops the batch: the faults the
trial's worker-output guard must catch.
"""

from __future__ import annotations

import torch


class ManyLeaves(torch.utils.data.Dataset[tuple[torch.Tensor, int, list[float]]]):
    """``length`` items of a ``dim`` vector, a label and ``width`` plain floats."""

    def __init__(self, length: int = 64, dim: int = 8, width: int = 300) -> None:
        self.length = length
        self.dim = dim
        self.width = width
        self.num_classes = 2

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, list[float]]:
        return torch.full((self.dim,), float(index)), index % 2, [float(index)] * self.width
