"""The parts of a batch a built-in step needs: its inputs and, if it has them, its targets."""

from __future__ import annotations

from typing import Any


def split_batch(batch: Any) -> tuple[Any, Any]:
    """(inputs, targets or None) from a tensor, a (inputs, targets, ...) sequence or a dict."""
    if isinstance(batch, dict):
        values = list(batch.values())
        return values[0], (values[1] if len(values) > 1 else None)
    if isinstance(batch, list | tuple):
        return batch[0], (batch[1] if len(batch) > 1 else None)
    return batch, None
