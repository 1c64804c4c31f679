"""When a timed window has measured enough: the rate's confidence interval, from batch means.

Consecutive steps are not independent (a slow batch delays the next; workers arrive in
bursts), so the spread of single steps says little about the spread of the window's rate.
The window's whole arrival cycles (:func:`~loadertune.measure._timing.cycle_bounds`) are grouped
into ``MIN_BLOCKS`` to ``MAX_BLOCKS`` consecutive blocks of (nearly) equal cycle counts; each
block's time per sample is one observation, and Student's t over the block means gives a
~95% interval (the method of batch means). A trial keeps timing, past ``trial.steps``, until
the interval's half-width is within ``trial.precision`` of the time per sample, or until
``trial.max_steps`` or ``trial.time_limit_s`` stops it: steady settings finish sooner, noisy
ones get more steps, and every trial says how sure its figure is (``rate_ci_pct``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from loadertune.measure._timing import StepRecord, cycle_bounds, span

MIN_BLOCKS = 5  # fewer blocks than this: too few to judge the spread, keep timing
MAX_BLOCKS = 10  # more cycles than blocks: cycles are grouped, blocks grow with the window
MAX_STEPS_FACTOR = 3  # trial.max_steps when left null: this many times trial.steps
MIN_STEPS = 2  # timed steps a window needs at least: fewer measure noise, not a rate
TAIL_EVENTS = 10  # long waits a window should hold to judge a setting whose steps stall

# Student's t, two-sided 95% (its 0.975 quantile), by degrees of freedom (blocks - 1).
_T975 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
    9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042, 60: 2.000, 120: 1.980,
}  # fmt: skip


def too_short(timed_steps: int, time_limit_s: float) -> str | None:
    """Why a window that ``trial.time_limit_s`` stopped after ``timed_steps`` is no figure
    (fewer than :data:`MIN_STEPS`, the floor ``trial.steps`` is held to), or None."""
    if timed_steps >= MIN_STEPS:
        return None
    return (
        f"trial.time_limit_s={time_limit_s:g}: the limit stopped the window after "
        f"{timed_steps} timed step(s), and a rate needs at least {MIN_STEPS}. Fix: raise "
        "trial.time_limit_s above the time of a few steps"
    )


def steps_for_tail(long_waits_per_1000_steps: float, steps: int, max_steps: int) -> int:
    """Timed steps a window needs to hold about :data:`TAIL_EVENTS` of the long waits a
    setting showed (``long_waits_per_1000_steps``), between ``steps`` and ``max_steps``.

    In-order batches wait for their slowest read: a setting that stalls now and then is as
    fast as its stalls let it be, and a window too short to hold several of them times it by
    luck (fast with none, slow with two). A setting that never stalled keeps ``steps``.
    """
    if not long_waits_per_1000_steps > 0:
        return steps
    need = math.ceil(TAIL_EVENTS * 1000.0 / long_waits_per_1000_steps)
    return max(steps, min(max_steps, need))


def t975(df: int) -> float:
    """Student's t 0.975 quantile for ``df`` degrees of freedom (the next tabulated lower
    ``df``, so never narrower than the exact interval); 1.96 beyond the table."""
    if df < 1:
        raise ValueError("a t interval needs at least 1 degree of freedom")
    if df > max(_T975):
        return 1.96
    return _T975[max(k for k in _T975 if k <= df)]


def block_rates(
    records: Sequence[StepRecord], num_workers: int | None = None, max_blocks: int = MAX_BLOCKS
) -> list[float]:
    """Time per sample (ms) of each block of consecutive whole arrival cycles, in order.

    Fewer than ``MIN_BLOCKS`` cycles give fewer blocks than the interval needs; callers
    check the length.
    """
    if not records:
        return []
    bounds = cycle_bounds(records, num_workers)
    cycles = len(bounds) - 1
    blocks = min(max_blocks, cycles)
    rates = []
    for k in range(blocks):
        first, last = bounds[k * cycles // blocks], bounds[(k + 1) * cycles // blocks]
        seconds, samples = span(records, first, last)
        if samples > 0:
            rates.append(seconds * 1000.0 / samples)
    return rates


def relative_half_width(rates: Sequence[float]) -> float | None:
    """Half-width of the ~95% t interval of the mean of ``rates``, over that mean.

    None with fewer than ``MIN_BLOCKS`` values or a mean that is not positive.
    """
    n = len(rates)
    if n < MIN_BLOCKS:
        return None
    mean = sum(rates) / n
    if mean <= 0:
        return None
    variance = sum((r - mean) ** 2 for r in rates) / (n - 1)
    return t975(n - 1) * math.sqrt(variance / n) / mean


def rate_ci(records: Sequence[StepRecord], num_workers: int | None = None) -> float | None:
    """The relative half-width of the ~95% interval of the window's time per sample.

    None while the window holds fewer than ``MIN_BLOCKS`` whole arrival cycles.
    """
    return relative_half_width(block_rates(records, num_workers))


@dataclass(frozen=True)
class StopRule:
    """When to stop timing: ``min_steps`` at least, ``max_steps`` at most, and in between
    once :func:`rate_ci` is within ``precision`` (None: stop at ``min_steps``).

    The interval is checked when the window has grown by a tenth since the last check
    (every step while it is short), so the check costs next to nothing inside the window.
    """

    min_steps: int
    max_steps: int
    precision: float | None
    num_workers: int | None = None

    @classmethod
    def for_trial(
        cls, steps: int, max_steps: int | None, precision: float | None, num_workers: int
    ) -> StopRule:
        """The rule for ``trial.steps``, ``trial.max_steps`` (None: ``MAX_STEPS_FACTOR``
        times ``steps``) and ``trial.precision``."""
        cap = max_steps if max_steps is not None else MAX_STEPS_FACTOR * steps
        if precision is None:
            cap = steps
        return cls(steps, max(cap, steps), precision, num_workers)

    def next_check(self, steps: int) -> int:
        """The step count at which to look again, after looking at ``steps``."""
        return min(self.max_steps, max(self.min_steps, steps + max(1, steps // 10)))

    def sure(self, records: Sequence[StepRecord]) -> bool:
        """Whether ``records`` are enough: the cap reached, or precise enough past the floor."""
        n = len(records)
        if n >= self.max_steps:
            return True
        if n < self.min_steps:
            return False
        if self.precision is None:
            return True
        ci = rate_ci(records, self.num_workers)
        return ci is not None and ci <= self.precision
