"""A user's own Dataset class, defined outside loadertune, for the custom-dataset path."""

from __future__ import annotations

import torch


class RandomVectors(torch.utils.data.Dataset[tuple[torch.Tensor, int]]):
    """``length`` random vectors of ``dim`` floats with labels 0..classes-1."""

    def __init__(self, length: int = 64, dim: int = 8, classes: int = 2) -> None:
        self.length = length
        self.dim = dim
        self.num_classes = classes

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        g = torch.Generator().manual_seed(index)
        return torch.randn(self.dim, generator=g), index % self.num_classes
