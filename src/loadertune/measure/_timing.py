"""Per-step timing and the summary that becomes a trial's objective.

A step is: wait for the batch, copy it to the device, run the model step. The objective is the
timed window's wall time over the samples it delivered (time per sample), not a median of step
times: with several workers batches arrive in bursts, and a median step hides the waiting.

Workers that share a bottleneck (the CPUs, one device) finish their batches together, so even
in the steady state batches arrive in cycles: one long wait, then up to ``num_workers`` quick
steps. A window that starts and ends at different points of that cycle counts up to a burst
too many or too few (up to ``num_workers / steps``: 40% for 16 workers over 40 steps). So the
rate is taken over whole cycles: from the start of the window's first long wait to the start
of its last (:func:`whole_cycles`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

Clock = Callable[[], float]


@dataclass(frozen=True)
class StepRecord:
    """One step's phases, in seconds, and the samples its batch held."""

    index: int
    start: float
    wait_s: float
    copy_s: float
    compute_s: float
    end: float
    samples: int
    # CPU seconds the training process (all its threads) used while waiting for the batch,
    # and while copying and stepping: with 0 workers the first is loading's own CPU.
    wait_cpu_s: float = 0.0
    step_cpu_s: float = 0.0

    @property
    def step_s(self) -> float:
        """Wall time of the whole step: wait + copy + compute."""
        return self.end - self.start


StepCallback = Callable[[StepRecord, bool], None]
"""Called after every step with the record and whether it was inside the timed window."""


@dataclass(frozen=True)
class TimingSummary:
    """The timed window in the units loadertune reports (milliseconds unless named)."""

    steps: int
    samples: int
    window_s: float
    time_per_sample_ms: float
    samples_per_s: float
    step_time_ms_p50: float
    step_time_ms_p90: float
    step_time_ms_p99: float
    data_wait_ms_p50: float
    data_wait_ms_p90: float
    data_wait_fraction: float
    copy_ms_mean: float
    compute_ms_mean: float
    # The whole arrival cycles the rate is taken over (the full window when arrivals are
    # steady): time_per_sample_ms = cycle_window_s * 1000 / cycle_samples.
    cycle_window_s: float = 0.0
    cycle_samples: int = 0
    # The tail of the wait for a batch: in-order batches wait for their slowest read, so a
    # rare stall shows here and in the rate, not in the median wait. A long wait is one
    # longer than the step's median compute (and LONG_WAIT_MS at least): the step stalled.
    data_wait_ms_p99: float = 0.0
    data_wait_ms_max: float = 0.0
    long_waits_per_1000_steps: float = 0.0
    # Cores the training process kept busy while it waited for batches (with 0 workers:
    # loading's CPU; near 0 when loading waits on I/O) and while it copied and stepped.
    wait_cpu_cores: float = 0.0
    step_cpu_cores: float = 0.0


class StepTimer:
    """Marks the phases of each step with an injectable clock (a fake one in tests)."""

    def __init__(
        self, clock: Clock = time.perf_counter, cpu_clock: Clock = time.process_time
    ) -> None:
        self.clock = clock
        self.cpu_clock = cpu_clock
        self.records: list[StepRecord] = []
        self._marks: list[float] = []
        self._cpu: list[float] = []
        self._paused_s = 0.0  # wall time of discarded steps, left out of later marks

    def now(self) -> float:
        """The clock, with the discarded steps' time taken out."""
        return self.clock() - self._paused_s

    def discard_last(self) -> StepRecord:
        """Take the last step out of the window, as if the clock had stopped during it (an
        iterable's pass ended and the next was opened: a boundary, not a stall)."""
        record = self.records.pop()
        self._paused_s += record.step_s
        return record

    def start(self) -> None:
        """The step begins: about to ask the loader for a batch."""
        self._marks = [self.now()]
        self._cpu = [self.cpu_clock()]

    def batch_ready(self) -> None:
        """The batch arrived from the loader."""
        self._marks.append(self.now())
        self._cpu.append(self.cpu_clock())

    def copied(self) -> None:
        """The batch is on the device (synchronised for an accelerator)."""
        self._marks.append(self.now())

    def stepped(self, samples: int) -> StepRecord:
        """The model step finished; record and return the step."""
        start, ready, copied = self._marks
        end = self.now()
        cpu_start, cpu_ready = self._cpu
        cpu_end = self.cpu_clock()
        record = StepRecord(
            index=len(self.records),
            start=start,
            wait_s=ready - start,
            copy_s=copied - ready,
            compute_s=end - copied,
            end=end,
            samples=samples,
            wait_cpu_s=cpu_ready - cpu_start,
            step_cpu_s=cpu_end - cpu_ready,
        )
        self.records.append(record)
        return record


LONG_WAIT = 0.5  # a wait of at least this share of the window's longest wait opens a cycle

Bound = tuple[float, int]
"""A cycle boundary: the instant a cycle opens (or the window closes) and its step index."""


def cycle_bounds(records: Sequence[StepRecord], num_workers: int | None = None) -> list[Bound]:
    """The boundaries of the whole arrival cycles in ``records``, in order.

    When some steps wait long for their batch (at least ``LONG_WAIT`` of the longest wait)
    and others between them do not (bursts), each long wait opens a cycle: the boundaries
    are the starts of those steps, and the window's edges (inside a burst) are left out.
    Otherwise (one producer, no waits, a single long one, or every step waiting alike) every
    step is a cycle of its own and the window's end closes the last. Steps
    ``[i, j)`` between boundaries ``(t0, i)`` and ``(t1, j)`` took ``t1 - t0`` seconds.
    """
    every_step = [(r.start, i) for i, r in enumerate(records)]
    every_step.append((records[-1].end, len(records)))
    if num_workers is not None and num_workers < 2:
        return every_step  # one producer: no bursts to align to
    longest = max(r.wait_s for r in records)
    long = [i for i, r in enumerate(records) if r.wait_s > 0 and r.wait_s >= LONG_WAIT * longest]
    bursty = len(long) >= 2 and long[-1] - long[0] + 1 > len(long)  # quick steps between
    if not bursty:
        return every_step
    return [(records[i].start, i) for i in long]


def span(records: Sequence[StepRecord], first: Bound, last: Bound) -> tuple[float, int]:
    """(seconds, samples) from boundary ``first`` to boundary ``last``."""
    return last[0] - first[0], sum(r.samples for r in records[first[1] : last[1]])


def whole_cycles(
    records: Sequence[StepRecord], num_workers: int | None = None
) -> tuple[float, int]:
    """(seconds, samples) of the whole arrival cycles in ``records`` (:func:`cycle_bounds`).

    From the start of the first long wait to the start of the last one when batches arrive
    in bursts; otherwise the whole window.
    """
    bounds = cycle_bounds(records, num_workers)
    return span(records, bounds[0], bounds[-1])


def summarize(records: Sequence[StepRecord], num_workers: int | None = None) -> TimingSummary:
    """Summarise a timed window: from the first step's start to the last step's end.

    The rate (``time_per_sample_ms``, ``samples_per_s``) is taken over the window's whole
    arrival cycles (:func:`whole_cycles`) when batches can arrive in bursts (two workers or
    more, or ``num_workers`` unknown); the other figures over the whole window.
    """
    if not records:
        raise ValueError("no timed steps to summarise")
    window = records[-1].end - records[0].start
    samples = sum(r.samples for r in records)
    cycle_s, cycle_samples = whole_cycles(records, num_workers)
    step_ms = np.array([r.step_s for r in records]) * 1000.0
    wait_ms = np.array([r.wait_s for r in records]) * 1000.0
    return TimingSummary(
        steps=len(records),
        samples=samples,
        window_s=window,
        time_per_sample_ms=cycle_s * 1000.0 / cycle_samples,
        samples_per_s=cycle_samples / cycle_s if cycle_s > 0 else float("inf"),
        step_time_ms_p50=float(np.percentile(step_ms, 50)),
        step_time_ms_p90=float(np.percentile(step_ms, 90)),
        step_time_ms_p99=float(np.percentile(step_ms, 99)),
        data_wait_ms_p50=float(np.percentile(wait_ms, 50)),
        data_wait_ms_p90=float(np.percentile(wait_ms, 90)),
        data_wait_fraction=float(wait_ms.sum() / 1000.0 / window) if window > 0 else 0.0,
        copy_ms_mean=float(np.mean([r.copy_s for r in records]) * 1000.0),
        compute_ms_mean=float(np.mean([r.compute_s for r in records]) * 1000.0),
        cycle_window_s=cycle_s,
        cycle_samples=cycle_samples,
        data_wait_ms_p99=float(np.percentile(wait_ms, 99)),
        data_wait_ms_max=float(wait_ms.max()),
        long_waits_per_1000_steps=1000.0 * long_waits(records) / len(records),
        wait_cpu_cores=_cores(sum(r.wait_cpu_s for r in records), sum(r.wait_s for r in records)),
        step_cpu_cores=_cores(
            sum(r.step_cpu_s for r in records),
            sum(r.copy_s + r.compute_s for r in records),
        ),
    )


LONG_WAIT_MS = 1.0  # a wait for a batch below this is never a stall


def long_waits(records: Sequence[StepRecord]) -> int:
    """How many steps waited for their batch longer than the window's median compute
    (copy and step; :data:`LONG_WAIT_MS` at least): stalls the training saw."""
    compute_ms = float(np.median([r.copy_s + r.compute_s for r in records])) * 1000.0
    limit_s = max(compute_ms, LONG_WAIT_MS) / 1000.0
    return sum(r.wait_s > limit_s for r in records)


def _cores(cpu_s: float, wall_s: float) -> float:
    return cpu_s / wall_s if wall_s > 0 else 0.0


T = TypeVar("T")


def pace_setter(ranks: Iterable[T], window_s: Callable[[T], Any]) -> T:
    """The rank that sets the node's pace: ranks in lock-step deliver every rank's samples
    in the slowest rank's window, so the node moves at that rank's speed (a trial's figure
    and AutoLoader's segments under several ranks alike). ``window_s`` gives a rank's window
    (or its time per batch; a tuple breaks ties)."""
    return max(ranks, key=window_s)
