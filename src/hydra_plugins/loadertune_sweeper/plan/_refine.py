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
from typing import TYPE_CHECKING, Any

from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState

from loadertune.config import DEFAULT_PREFETCH_FACTOR

from . import _baselines, _enumerate, _guess

if TYPE_CHECKING:
    import optuna

    from ._sweep_plan import SweepPlan

# A count within this of the fastest count measured suffices: one search trial on a shared
# machine scatters by about as much (the pruner's tolerance), and the verdict settles the rest.
SUFFICIENT = 0.05
GAP = 0.25  # bisect while the sufficient count and the one below differ by more than this
MIN_GAP = 2  # ... and by more than this many workers: a small range is sampled or walked


def midpoint(times: dict[int, float], low: int = 0, step: int = 1) -> int | None:
    """The count to measure next, from the best time per sample measured at each count (inf
    for a count measured but not completed), on the grid ``low + k x step``; None when the
    smallest sufficient count is known closely enough."""
    finite = [t for t in times.values() if math.isfinite(t)]
    if not finite:
        return None
    best = min(finite)
    enough = min(w for w, t in times.items() if t <= best * (1 + SUFFICIENT))
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
    times: dict[int, float] = {}
    for t in study.get_trials(deepcopy=False):
        if wkey not in t.params or not _enumerate.answered(t):
            continue
        value = t.value if t.state == TrialState.COMPLETE and t.value is not None else math.inf
        workers = int(t.params[wkey])
        times[workers] = min(times.get(workers, math.inf), value)
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


def edge(times: dict[int, float]) -> int | None:
    """The fewest sufficient count, once the bisection has closed in on it (a count below it
    measured and :func:`midpoint` done); None before, or when no count below was measured."""
    finite = [t for t in times.values() if math.isfinite(t)]
    if not finite or midpoint(times) is not None:
        return None
    enough = min(w for w, t in times.items() if t <= min(finite) * (1 + SUFFICIENT))
    return enough if any(w < enough for w in times) else None


def depths_measured(study: optuna.Study, wkey: str, pkey: str, workers: int) -> dict[int, float]:
    """The best time per sample at each prefetch depth a trial answered at ``workers`` (inf
    for one pruned, refused or crashed)."""
    times: dict[int, float] = {}
    for t in study.get_trials(deepcopy=False):
        if t.params.get(wkey) != workers or pkey not in t.params or not _enumerate.answered(t):
            continue
        value = t.value if t.state == TrialState.COMPLETE and t.value is not None else math.inf
        depth = int(t.params[pkey])
        times[depth] = min(times.get(depth, math.inf), value)
    return times


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


def _depth_keys(study: optuna.Study, plan: SweepPlan) -> tuple[str, str, list[int]] | None:
    """The workers key, the prefetch key and its choices, where the depth is stepped: an int
    ``num_workers`` range the guess widened for I/O, and a choice of prefetch depths."""
    wkey = plan.workers_key()
    pkey = _baselines.key_of(plan.space, "loader.prefetch_factor")
    if wkey is None or pkey is None or not isinstance(plan.space[wkey], IntDistribution):
        return None
    ranged, depth = _guess.study_range(study), plan.space[pkey]
    if ranged is None or not ranged.widened or not isinstance(depth, CategoricalDistribution):
        return None
    return wkey, pkey, [int(c) for c in depth.choices if isinstance(c, int)]


def next_depth(study: optuna.Study, plan: SweepPlan) -> dict[str, Any] | None:
    """The params of the next prefetch depth to measure at the fewest sufficient count, or
    None: not a range widened for I/O, a trial waits in the queue, the count is not known
    yet, or the depth is settled (:func:`deeper`)."""
    keys = _depth_keys(study, plan)
    if keys is None or study.get_trials(
        deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING)
    ):
        return None
    wkey, pkey, choices = keys
    workers = edge(counts_measured(study, wkey))
    if not workers:
        return None
    depth = deeper(depths_measured(study, wkey, pkey, workers), choices)
    return None if depth is None else {wkey: workers, pkey: depth}


def depth_settled(study: optuna.Study, plan: SweepPlan) -> tuple[int, int] | None:
    """(the fewest sufficient count, the deepest depth measured there) once the depth is
    settled there (:func:`deeper` has nothing left to step); None otherwise."""
    keys = _depth_keys(study, plan)
    if keys is None:
        return None
    wkey, pkey, choices = keys
    workers = edge(counts_measured(study, wkey))
    if not workers:
        return None
    depths = depths_measured(study, wkey, pkey, workers)
    if deeper(depths, choices) is not None or not depths:
        return None
    return workers, max(depths)
