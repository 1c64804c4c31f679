"""The parts of a batch a built-in step needs: its inputs and, if it has them, its targets."""

from __future__ import annotations

from collections.abc import Sized
from typing import Any

from loadertune.errors import ConfigError


def split_batch(batch: Any) -> tuple[Any, Any]:
    """(inputs, targets or None) from a tensor, a (inputs, targets, ...) sequence or a dict."""
    if isinstance(batch, dict):
        values = list(batch.values())
        return values[0], (values[1] if len(values) > 1 else None)
    if isinstance(batch, list | tuple):
        return batch[0], (batch[1] if len(batch) > 1 else None)
    return batch, None


def samples_in(batch: Any, collate: str | None) -> int:
    """How many samples ``batch`` holds: its inputs' rows (a tensor's first dimension, a
    sequence's length). A trial's rate is per sample, so a batch with none, or inputs with no
    length, cannot be timed.

    Raises:
        ConfigError: naming ``loader.collate_fn`` (``collate``, its dotted path; None for
            PyTorch's default), what the batch was and the shape to return.
    """
    empty = isinstance(batch, dict | list | tuple) and not batch
    inputs = None if empty else split_batch(batch)[0]
    shape = getattr(inputs, "shape", None)
    if shape is not None:
        count = int(shape[0]) if len(shape) else None
    else:
        count = len(inputs) if isinstance(inputs, Sized) and not isinstance(inputs, str) else None
    if count:
        return count
    what = "an empty " + type(batch).__name__ if empty else f"inputs of {_described(inputs)}"
    raise ConfigError(
        "loader.collate_fn",
        collate,
        f"made a batch with {what}: no samples to time",
        "return a tensor, an (inputs, targets, ...) sequence or a dict whose first value has "
        "one row per sample (a tensor or a list)",
    )


def _described(inputs: Any) -> str:
    shape = getattr(inputs, "shape", None)
    kind = type(inputs).__name__
    return f"{kind} shape {tuple(shape)}" if shape is not None else f"{kind} {inputs!r:.40}"
