"""The fewest workers as fast as the most: bisection between the counts measured.

On latency-bound storage the ``num_workers`` range reaches dozens of workers (a widened
range, :mod:`._guess`), too many to walk one by one. The doubling path's geometric steps
(2, 4, 8 ... the range's top, :mod:`._baselines`) find roughly where more workers stop
helping; then, while nothing else waits in the queue, the study measures the count halfway
between the fewest workers measured *sufficient* (within :data:`SUFFICIENT` of the fastest
count measured) and the most measured *insufficient* below them, until the two lie within
:data:`GAP` of each other (and :data:`MIN_GAP` workers). Between 16 and 32 that is 24, then
20 or 28: the smallest sufficient count within a quarter in one or two trials. No finer:
each count measured just short of enough is a cheaper setting nearly as fast, which a noisy
verdict may take for as fast, and a quarter is well within the factor of two the doubling
path leaves. The verdict then measures the fastest settings again and picks among them.

Once the count is known, in a range the guess widened for I/O (:mod:`._guess`: workers that
wait on reads), the prefetch depth is stepped at that count (:func:`next_depth`): batches in
flight are workers x depth, and at the fewest sufficient count a deeper queue is what rides
out a stalled read. Each step doubles the depth (the space's next choice up from PyTorch's 2)
while the step before bought more than :data:`SUFFICIENT`; when one buys less, or no deeper
choice is left, the depth is settled (:func:`depth_settled`), which one of the search's
ceilings counts (:mod:`._ceiling`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState

from loadertune.config import DEFAULT_PREFETCH_FACTOR

from . import _baselines, _enumerate, _guess

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from ._sweep_plan import SweepPlan

# A count within this of the fastest count measured suffices: one search trial on a shared
# machine scatters by about as much (the pruner's tolerance), and the verdict settles the rest.
SUFFICIENT = 0.05
GAP = 0.25  # bisect while the sufficient count and the one below differ by more than this
MIN_GAP = 2  # ... and by more than this many workers: a small range is sampled or walked


def fewest_sufficient(times: dict[int, float]) -> int | None:
    """The fewest count measured within :data:`SUFFICIENT` of the fastest (``times``: the
    best time per sample at each count, inf for one not completed); None if none completed."""
    finite = [t for t in times.values() if math.isfinite(t)]
    if not finite:
        return None
    return min(w for w, t in times.items() if t <= min(finite) * (1 + SUFFICIENT))


def midpoint(times: dict[int, float], low: int = 0, step: int = 1) -> int | None:
    """The count to measure next, from the best time per sample measured at each count (inf
    for a count measured but not completed), on the grid ``low + k x step``; None when the
    smallest sufficient count is known closely enough."""
    enough = fewest_sufficient(times)
    if enough is None:
        return None
    below = [w for w in times if w < enough]
    if not below:
        return None
    under = max(below)
    if enough - under <= max(MIN_GAP, GAP * enough):
        return None
    mid = low + ((under + (enough - under) // 2 - low) // step) * step
    return mid if under < mid < enough else None


def counts_measured(study: optuna.Study, wkey: str) -> dict[int, float]:
    """The best time per sample at each number of workers a trial answered: inf for a count
    pruned, refused or crashed (not sufficient, and not asked again), whatever its other
    settings."""
    return _best_at(study, wkey, lambda t: True)


def depths_measured(study: optuna.Study, wkey: str, pkey: str, workers: int) -> dict[int, float]:
    """The best time per sample at each prefetch depth a trial answered at ``workers`` (inf
    for one pruned, refused or crashed)."""
    return _best_at(study, pkey, lambda t: t.params.get(wkey) == workers)


def _best_at(
    study: optuna.Study, key: str, where: Callable[[FrozenTrial], bool]
) -> dict[int, float]:
    """The best time per sample at each value of ``key`` of the trials ``where`` keeps that
    answered: inf for a value pruned, refused or crashed."""
    times: dict[int, float] = {}
    for t in study.get_trials(deepcopy=False):
        if key not in t.params or not _enumerate.answered(t) or not where(t):
            continue
        value = t.value if t.state == TrialState.COMPLETE and t.value is not None else math.inf
        at = int(t.params[key])
        times[at] = min(times.get(at, math.inf), value)
    return times


def next_count(study: optuna.Study, plan: SweepPlan) -> dict[str, Any] | None:
    """The params of the count to measure next to close in on the fewest sufficient workers,
    or None: no int ``num_workers`` range, a trial waits in the queue (a baseline, a rung,
    the guess), or the count is known closely enough."""
    wkey = plan.workers_key()
    dist = plan.space.get(wkey) if wkey else None
    if wkey is None or not isinstance(dist, IntDistribution):
        return None
    if study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING)):
        return None
    mid = midpoint(counts_measured(study, wkey), dist.low, dist.step)
    if mid is None or not dist.low <= mid <= dist.high:
        return None
    return _baselines.params_for(plan.space, mid)


def edge(times: dict[int, float], low: int = 0, step: int = 1) -> int | None:
    """The fewest sufficient count, once the bisection has closed in on it (a count below it
    measured and :func:`midpoint` done, on the same grid); None before, or when no count
    below was measured."""
    enough = fewest_sufficient(times)
    if enough is None or midpoint(times, low, step) is not None:
        return None
    return enough if any(w < enough for w in times) else None


def deeper(depths: dict[int, float], choices: list[int]) -> int | None:
    """The next depth up from PyTorch's 2 to measure, given the times measured at each: the
    first not measured, while every step measured bought more than :data:`SUFFICIENT` over
    the depths below it; None once a step bought less (the depth is settled) or none is left."""
    best = math.inf
    for depth in sorted(c for c in choices if c >= DEFAULT_PREFETCH_FACTOR):
        if depth not in depths:
            return depth
        if math.isfinite(best) and not depths[depth] < best * (1 - SUFFICIENT):
            return None
        best = min(best, depths[depth])
    return None


@dataclass(frozen=True)
class _Edge:
    """Where the depth is stepped, and what was measured there."""

    wkey: str
    pkey: str
    workers: int  # the fewest sufficient count
    depths: dict[int, float]  # its best time at each depth measured (depths_measured)
    choices: list[int]  # the space's prefetch depths

    @property
    def next(self) -> int | None:
        return deeper(self.depths, self.choices)


def _at_edge(study: optuna.Study, plan: SweepPlan) -> _Edge | None:
    """The fewest sufficient count and its depths measured, in an int ``num_workers`` range
    the guess widened for I/O with a choice of prefetch depths, once the bisection is done;
    None otherwise."""
    wkey = plan.workers_key()
    pkey = _baselines.key_of(plan.space, "loader.prefetch_factor")
    if wkey is None or pkey is None:
        return None
    dist, depth, ranged = plan.space[wkey], plan.space[pkey], _guess.study_range(study)
    if not isinstance(dist, IntDistribution) or not isinstance(depth, CategoricalDistribution):
        return None
    if ranged is None or not ranged.widened:
        return None
    workers = edge(counts_measured(study, wkey), dist.low, dist.step)
    if not workers:
        return None
    choices = [int(c) for c in depth.choices if isinstance(c, int)]
    return _Edge(wkey, pkey, workers, depths_measured(study, wkey, pkey, workers), choices)


def next_depth(study: optuna.Study, plan: SweepPlan) -> dict[str, Any] | None:
    """The params of the next prefetch depth to measure at the fewest sufficient count, or
    None: not a range widened for I/O, a trial waits in the queue, the count is not known
    yet, or the depth is settled (:func:`deeper`)."""
    if study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING)):
        return None
    at = _at_edge(study, plan)
    depth = at.next if at is not None else None
    return None if at is None or depth is None else {at.wkey: at.workers, at.pkey: depth}


def depth_settled(study: optuna.Study, plan: SweepPlan) -> tuple[int, int] | None:
    """(the fewest sufficient count, the deepest depth measured there) once the depth is
    settled there (:func:`deeper` has nothing left to step); None otherwise."""
    at = _at_edge(study, plan)
    if at is None or not at.depths or at.next is not None:
        return None
    return at.workers, max(at.depths)
