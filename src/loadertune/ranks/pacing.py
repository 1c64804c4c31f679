"""Pace each rank's step as data-parallel training paces it, so no rank runs ahead.

The built-in models and a ``model=custom`` Module train wrapped in
``DistributedDataParallel`` (its gradient all-reduce holds every rank to the slowest); a
user's own ``step(batch)`` is followed by an all-reduce of one number, as a training loop's
gradient or loss reduction would be.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loadertune import models
from loadertune._lazy import ddp_hooks, dist, torch

Beat = Callable[[], None]


def distribute(step: Callable[[Any], None], device: Any, beat: Beat) -> Callable[[Any], None]:
    """``step`` paced across the process group: its module in DDP, else an all-reduce after.

    ``beat`` marks the rank's own work done as it starts waiting for the others (before the
    all-reduce; in DDP, as each gradient bucket's all-reduce starts), so a rank that hangs
    is told from the ranks waiting for it.
    """
    if isinstance(step, models.RealStep):
        step.network = _ddp(step.network, device, beat)
        return step
    if isinstance(step, models.ModuleStep):
        step.module = _ddp(step.module, device, beat)
        return step
    if isinstance(step, models.LazyUserStep):
        return _LazyPaced(step, device, beat)
    return PacedStep(step, device, beat)


def _ddp(module: Any, device: Any, beat: Beat) -> Any:
    """``module`` in DDP, with PyTorch's own all-reduce hook behind ``beat``."""
    ids = [device.index] if device.type == "cuda" else None
    wrapped = torch.nn.parallel.DistributedDataParallel(module, device_ids=ids)

    def hook(state: Any, bucket: Any) -> Any:
        beat()
        return ddp_hooks.allreduce_hook(state, bucket)

    # DDP checks a hook's annotations against its own types, which postponed ones are not.
    bucket_type = dist.GradBucket  # type: ignore[attr-defined]  # public, stubs lack it
    hook.__annotations__ = {"bucket": bucket_type, "return": torch.futures.Future[torch.Tensor]}
    wrapped.register_comm_hook(None, hook)
    return wrapped


class PacedStep:
    """A user's step, then an all-reduce of one number across the ranks."""

    def __init__(self, step: Callable[[Any], None], device: Any, beat: Beat) -> None:
        self.step = step
        self.beat = beat
        self.token = torch.zeros(1, device=device)

    def __call__(self, batch: Any) -> None:
        self.step(batch)
        self.beat()
        dist.all_reduce(self.token)


class _LazyPaced:
    """``model=custom``: the factory's step is made on the first batch, then paced."""

    def __init__(self, lazy: Any, device: Any, beat: Beat) -> None:
        self.lazy = lazy
        self.device = device
        self.beat = beat

    def __call__(self, batch: Any) -> None:
        if self.lazy.step is None:
            made = models.build_user_step(self.lazy.cfg, self.lazy.device, batch)
            self.lazy.step = distribute(made, self.device, self.beat)
        self.lazy(batch)
