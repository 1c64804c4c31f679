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


def no_samples(items: list[Any]) -> torch.Tensor:
    """A collate that makes a batch of no rows, whatever it is given."""
    return torch.empty(0, 16)


_CALLS = [0]


def no_samples_later(items: list[Any]) -> Any:
    """A collate whose first batches are good and whose later ones hold no samples."""
    _CALLS[0] += 1
    return [] if _CALLS[0] > 3 else torch.stack([item[0] for item in items])


def step_into_loadertune_fault() -> Any:
    """A factory whose step reaches an error raised inside loadertune's own code (its timing
    summary of an empty window), as a bug in loadertune would."""
    from loadertune.measure._timing import summarize

    def step(batch: Any) -> None:
        summarize([])

    return step


class IntoLoadertune(torch.utils.data.Dataset[torch.Tensor]):
    """A dataset whose items reach an error raised inside loadertune's own code."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        from loadertune.measure._timing import summarize

        summarize([])
        return torch.zeros(2)
