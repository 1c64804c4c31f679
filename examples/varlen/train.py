"""Training steps for :mod:`varlen.data` batches: a factory that sizes itself, and a Module.

loadertune calls :func:`make_step` with the ``+model.*`` keyword arguments, the trial's
``device`` and a sample ``batch`` (collated by ``pad_collate``, on the device), and times the
step it returns. :class:`TinyLM` shows the other way: return a Module and loadertune trains it
(cross-entropy on the (inputs, targets) batch, SGD).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class TinyLM(nn.Module):
    """Embedding, a GRU and a projection back to the vocabulary: (B, L) ids -> (B, L, V)."""

    def __init__(self, vocab_size: int = 1000, d_model: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.rnn = nn.GRU(d_model, d_model, batch_first=True)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.rnn(self.embed(inputs))
        out: torch.Tensor = self.head(hidden)
        return out


def make_step(
    batch: Any, device: torch.device, vocab_size: int = 1000, d_model: int = 64, lr: float = 1e-3
) -> Callable[[Any], None]:
    """One AdamW step of :class:`TinyLM` on a padded (inputs, targets) batch."""
    inputs, _ = batch
    assert inputs.dtype == torch.long, "expects the (inputs, targets) batches of pad_collate"
    model = TinyLM(vocab_size, d_model).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)

    def step(batch: Any) -> None:
        inputs, targets = batch
        optimizer.zero_grad(set_to_none=True)
        logits = model(inputs)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
        loss.backward()
        optimizer.step()

    return step


def accelerator_step(step_ms: float = 4.0) -> Callable[[Any], None]:
    """A step of ``step_ms`` that holds no CPU (a sleep), as a GPU step leaves the host free."""

    def step(batch: Any) -> None:
        time.sleep(step_ms / 1000.0)

    return step
