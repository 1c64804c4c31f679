"""PyTorch's own DataLoader rules, written once: what needs workers, and its defaults.

``DataLoader`` refuses ``prefetch_factor``, ``persistent_workers`` and
``multiprocessing_context`` without workers, and fills in ``prefetch_factor=2`` when it is
left ``None`` with workers. Validation, the loader builder, the sweep's search rules and the
trial's look-ahead all ask here, so the rules cannot drift apart.
"""

from __future__ import annotations

NEEDS_WORKERS = frozenset({"prefetch_factor", "persistent_workers", "multiprocessing_context"})
"""Loader settings PyTorch accepts only with ``num_workers > 0``."""

DEFAULT_PREFETCH_FACTOR = 2
"""PyTorch's ``prefetch_factor`` when it is ``None`` and ``num_workers > 0``."""


def needs_workers(name: str) -> bool:
    """Whether the loader setting ``name`` (no ``loader.`` prefix) needs ``num_workers > 0``."""
    return name in NEEDS_WORKERS


def prefetch_factor_of(num_workers: int, prefetch_factor: int | None) -> int | None:
    """The ``prefetch_factor`` PyTorch uses: none without workers, 2 when left unset."""
    if num_workers == 0:
        return None
    return DEFAULT_PREFETCH_FACTOR if prefetch_factor is None else prefetch_factor


def in_flight(num_workers: int, prefetch_factor: int | None) -> int:
    """Batches a DataLoader keeps loaded ahead: ``num_workers x prefetch_factor``."""
    return num_workers * (prefetch_factor_of(num_workers, prefetch_factor) or 0)
