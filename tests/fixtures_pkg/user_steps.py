"""A user's step factories and collates that go wrong, each in one way, for model=custom."""

from __future__ import annotations

from typing import Any

import torch


def raises(**kwargs: Any) -> None:
    """A factory that fails."""
    raise RuntimeError("no GPU budget")


def returns_number() -> int:
    """A factory that returns neither a step nor a Module."""
    return 3


def frozen_module() -> torch.nn.Module:
    """A Module with nothing to train."""
    return torch.nn.Linear(2, 2).requires_grad_(False)


def broken_collate(items: list[Any]) -> Any:
    """A collate that raises on any batch."""
    raise ValueError("cannot pad these")


lambda_collate = lambda items: torch.stack(items)  # noqa: E731 (not picklable by name)


def sized_factory(batch: Any, device: torch.device, scale: int = 1) -> Any:
    """A factory that records what it was given, and steps by doing nothing."""
    sized_factory.seen = (type(batch).__name__, str(device), scale)  # type: ignore[attr-defined]
    return lambda batch: None


def step_that_raises() -> Any:
    """A factory whose step fails on every batch: a bug in the user's training step."""

    def step(batch: Any) -> None:
        raise ZeroDivisionError("loss scale went to zero")

    return step
