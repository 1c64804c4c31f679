"""Training steps a trial times: a sleep standing in for an accelerator, or a real update."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from loadertune.models._batch import split_batch


class SimulatedStep:
    """Stands in for an accelerator step: sleeps, so it holds no CPU while loading runs."""

    def __init__(self, step_ms: float) -> None:
        self.seconds = step_ms / 1000.0

    def __call__(self, batch: Any) -> None:
        time.sleep(self.seconds)


def as_float(inputs: torch.Tensor) -> torch.Tensor:
    """Inputs as float on the device; uint8 pixels scaled to [0, 1] as a GPU pipeline would."""
    if inputs.dtype == torch.uint8:
        return inputs.float().div_(255.0)
    return inputs.float()


def classification_loss(out: torch.Tensor, targets: torch.Tensor | None, classes: int) -> Any:
    """Cross-entropy for integer class labels; otherwise a mean square (any target works)."""
    if targets is not None and not targets.is_floating_point() and targets.dim() == 1:
        return F.cross_entropy(out, targets.long() % classes)
    return out.float().square().mean()


class RealStep:
    """Forward, loss, backward and optimizer step."""

    def __init__(
        self,
        network: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        forward: Callable[[torch.nn.Module, torch.Tensor, torch.Tensor | None], Any],
    ) -> None:
        self.network = network
        self.optimizer = optimizer
        self.forward = forward

    def __call__(self, batch: Any) -> None:
        inputs, targets = split_batch(batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.forward(self.network, inputs, targets)
        loss.backward()
        self.optimizer.step()
