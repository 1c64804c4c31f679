"""The model-based first guess at ``num_workers``, from one batch's load and step time.

When the training process loads every batch itself (``num_workers=0``), the wait for a batch
is the load time of one batch and the compute phase is the model step. To hide loading behind
the step, about ``load time per batch / step time`` workers must load in parallel. That count
is bounded by what the CPUs can run when loading is CPU work (a worker waiting on I/O costs no
CPU, so an I/O-bound pipeline may need more workers than cores), by the memory budget, and by
the most workers the caller allows. The sweep guesses from its default trial, AutoLoader from
its first steps.

A heavy tail (an object store's rare cold miss: most batches quick, a few wait 100 ms or more)
needs more: batches arrive in order, so while one batch's load takes its tail time the step
runs only on the batches already loaded ahead of it, ``num_workers x prefetch_factor`` at
most. Hiding a tail load ``T`` takes about ``T / (prefetch_factor x step)`` workers, however
quick the mean load is; the guess is the larger of the two counts (bound ``tail``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from enum import Enum
from typing import Any

NEAR = 0.05  # a batch loaded within 5% of the step counts as hidden behind it


class Bound(str, Enum):
    """What set the guessed number of workers."""

    NEGLIGIBLE = "loading is negligible"
    HIDES_LOADING = "hides loading"
    CPUS = "cpus"
    TAIL = "hides the tail"  # enough batches in flight to ride out the slowest loads
    MEMORY = "memory"
    SEARCH_SPACE = "search space"  # the top of the sweep's num_workers range
    MAX_WORKERS = "max_workers"  # AutoLoader's max_workers


@dataclass(frozen=True)
class Guess:
    """Predicted workers and time per sample, with the figures they came from."""

    workers: int
    time_per_sample_ms: float
    load_ms_per_batch: float
    step_ms: float
    cpu_share_of_loading: float
    bound: Bound  # what set it
    ceiling: int = 0  # the most workers the CPU, memory and space bounds allow together
    step_cpu_cores: float = 0.0  # cores the training step kept busy
    tail_load_ms_per_batch: float = 0.0  # the slow loads it must ride out (0: not known)

    @property
    def load_ms(self) -> float:
        """The load time of one batch (AutoLoader's name for ``load_ms_per_batch``)."""
        return self.load_ms_per_batch

    def as_attrs(self) -> dict[str, Any]:
        """The guess as plain data (JSON)."""
        return {**asdict(self), "bound": self.bound.value}

    @classmethod
    def from_attrs(cls, attrs: dict[str, Any] | None) -> Guess | None:
        """The guess :meth:`as_attrs` wrote, or None."""
        if not attrs:
            return None
        known = {f.name for f in fields(cls)}
        kept = {k: v for k, v in attrs.items() if k in known}
        return cls(**{**kept, "bound": Bound(kept["bound"])})


def guess(
    *,
    load_ms_per_batch: float,
    step_ms: float,
    batch_size: int = 1,
    cpu_share_of_loading: float,
    usable_cpus: int,
    memory_per_worker_mb: float = 0.0,
    memory_budget_mb: float = 0.0,
    max_workers: int,
    step_cpu_cores: float = 0.0,
    capped_by: Bound = Bound.SEARCH_SPACE,
    tail_load_ms_per_batch: float = 0.0,
    prefetch_factor: int = 2,
) -> Guess:
    """Workers needed to hide loading behind the step, within CPU, memory and ``max_workers``.

    ``cpu_share_of_loading`` is the cores loading keeps busy while it runs (about 1 for
    decoding, about 0 for waiting on reads), ``step_cpu_cores`` the cores the training step
    keeps busy (0 for an accelerator's step). Every batch costs the CPUs both; spread over
    all usable CPUs at best, that is a time per batch no number of workers can beat. No
    memory bound when ``memory_per_worker_mb`` is 0; ``capped_by`` names ``max_workers``.
    ``load_ms_per_batch`` is the mean load (it sets the rate), ``tail_load_ms_per_batch`` a
    slow one (a high percentile) that ``prefetch_factor`` batches a worker must cover.
    """
    step = max(step_ms, 1e-3)
    cpus = max(usable_cpus, 1)
    cpu_floor = (load_ms_per_batch * cpu_share_of_loading + step_ms * step_cpu_cores) / cpus
    best = max(step, cpu_floor)
    ceiling = max_workers
    if load_ms_per_batch <= NEAR * step:
        workers, bound = 0, Bound.NEGLIGIBLE
    else:
        cpus_bound = cpu_floor > step  # more workers, or deeper look-ahead, share the same CPUs
        tail = 0.0 if cpus_bound else tail_load_ms_per_batch
        workers, bound = _hiding(load_ms_per_batch, tail, best, prefetch_factor)
        if cpus_bound:
            bound, ceiling = Bound.CPUS, min(ceiling, workers)
    if memory_per_worker_mb > 0:
        memory_cap = max(1, int(memory_budget_mb // memory_per_worker_mb))
        ceiling = min(ceiling, memory_cap)
        if workers > memory_cap:
            workers, bound = memory_cap, Bound.MEMORY
    if workers > max_workers:
        workers, bound = max_workers, capped_by
    if workers == 0:
        per_batch = load_ms_per_batch + step_ms
    else:
        per_batch = max(step_ms, load_ms_per_batch / workers, cpu_floor)
    return Guess(
        workers=workers,
        time_per_sample_ms=per_batch / batch_size,
        load_ms_per_batch=load_ms_per_batch,
        step_ms=step_ms,
        cpu_share_of_loading=cpu_share_of_loading,
        bound=bound,
        ceiling=max(ceiling, 1),
        step_cpu_cores=step_cpu_cores,
        tail_load_ms_per_batch=tail_load_ms_per_batch,
    )


def _hiding(
    load_ms: float, tail_ms: float, best_ms: float, prefetch_factor: int
) -> tuple[int, Bound]:
    """The fewest workers that bring a batch within NEAR of the best reachable (the last few
    percent cost a whole worker each and are below what a repeat can tell apart), or, when
    more, the workers whose batches in flight ride out a tail load (bound ``TAIL``)."""
    workers = max(1, math.ceil(load_ms / (best_ms * (1 + NEAR))))
    in_flight = math.ceil(tail_ms / (best_ms * max(prefetch_factor, 1)))
    return (in_flight, Bound.TAIL) if in_flight > workers else (workers, Bound.HIDES_LOADING)
