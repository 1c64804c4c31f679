"""What keeps a trial's timed window in the steady state: the look-ahead consumed before
timing starts, and one long stream of indices so no epoch ends inside the window."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from loadertune._lazy import torch_data
from loadertune.config import in_flight

__all__ = ["stream_sampler", "warmup_steps"]


def warmup_steps(asked: int, num_workers: int, prefetch_factor: int | None = None) -> int:
    """Untimed steps after the first batch: ``asked``, but at least the loader's look-ahead.

    With workers, a DataLoader keeps ``num_workers x prefetch_factor`` batches in flight
    (:func:`~loadertune.config._torch_rules.in_flight`). Timing must start once that pipeline is in
    its steady state: the workers' first batches arrive together (a burst that took one
    worker's load time), and while the queue fills the workers load at full speed. Timing
    from inside either phase counts batches loaded before the window began, or slows the step
    with loading it will not pay for later; both bias the figure by setting (a 20%
    overstatement for 16 workers on a slow device, over a 40-step window). So the look-ahead
    is consumed first, whatever ``trial.warmup_steps`` says.
    """
    return max(asked, in_flight(num_workers, prefetch_factor))


def stream_sampler(size: int, length: int, shuffle: bool, generator: Any) -> Any:
    """Sample indices for a trial: ``length`` of them from passes over the dataset, as one epoch.

    A DataLoader's workers stop loading when its epoch has no batches left to hand out, so
    near an epoch's end the step no longer shares the CPUs with loading, and a timed window
    there (or a small dataset's whole epoch, loaded ahead during warm-up) flatters settings
    with a deep look-ahead. Back-to-back passes (each shuffled anew when ``shuffle``:
    PyTorch's ``RandomSampler`` with ``num_samples`` beyond the dataset) keep every timed
    step in the steady state. Worker start-up, which a real epoch pays again unless
    ``persistent_workers``, is ``first_batch_s``.
    """
    if shuffle:
        return torch_data.RandomSampler(range(size), num_samples=length, generator=generator)
    return _InOrder(size, length)


class _InOrder:
    """``length`` indices of unshuffled passes over a dataset of ``size``: 0, 1, ... 0, 1 ..."""

    def __init__(self, size: int, length: int) -> None:
        self.size, self.length = size, length

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[int]:
        return (i % self.size for i in range(self.length))
