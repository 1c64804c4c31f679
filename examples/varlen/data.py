"""Variable-length token sequences that take a while to read, and the collate that pads them.

PyTorch's default collate cannot stack sequences of different lengths ("stack expects each
tensor to be equal size"); :func:`pad_collate` pads each batch to its longest sequence.
"""

from __future__ import annotations

import random
import time

import torch
from torch.utils.data import Dataset

PAD_TARGET = -100
"""Target id of padded positions: ``torch.nn.functional.cross_entropy`` ignores it."""


class VarLenTokens(Dataset[torch.Tensor]):
    """``count`` token sequences of ``min_len`` to ``max_len`` ids, each read in ``read_ms``.

    The read is a sleep standing in for storage latency (object store, network file system):
    it holds no CPU, so more workers than cores still help. Lengths and ids are drawn from
    ``seed``, so every process sees the same data.
    """

    def __init__(
        self,
        count: int = 4096,
        min_len: int = 16,
        max_len: int = 128,
        vocab_size: int = 1000,
        read_ms: float = 2.0,
        seed: int = 0,
    ) -> None:
        rng = torch.Generator().manual_seed(seed)
        self.lengths = torch.randint(min_len, max_len + 1, (count,), generator=rng).tolist()
        self.vocab_size = vocab_size
        self.read_s = read_ms / 1000.0
        self.seed = seed

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.read_s > 0:
            time.sleep(self.read_s)
        rng = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        return torch.randint(0, self.vocab_size, (self.lengths[index],), generator=rng)


def pad_collate(items: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) shaped (batch, longest - 1): next-token pairs, padded.

    Inputs are padded with 0 and targets with :data:`PAD_TARGET`, so padding adds no loss.
    """
    longest = max(len(t) for t in items)
    inputs = torch.zeros(len(items), longest - 1, dtype=torch.long)
    targets = torch.full((len(items), longest - 1), PAD_TARGET, dtype=torch.long)
    for row, tokens in enumerate(items):
        inputs[row, : len(tokens) - 1] = tokens[:-1]
        targets[row, : len(tokens) - 1] = tokens[1:]
    return inputs, targets


def seed_worker(worker_id: int) -> None:
    """Seed Python's ``random`` in each worker from torch's per-worker seed (augmentations)."""
    random.seed(torch.initial_seed() % 2**32)
