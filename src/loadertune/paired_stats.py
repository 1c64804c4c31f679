"""Comparing settings timed in interleaved rounds: the statistics behind every verdict.

Settings are measured once per round, the rounds interleaved (A B C A B C ...), so the ratio
of two settings' times within a round cancels what the machine did in that round: a steady
5% gap stands out even while the machine's own speed wanders by 30%. The decision rules on
top (:mod:`loadertune.decision`), which the sweep's verdict and AutoLoader's tuning both call,
decide on these functions and thresholds, so a tuning session and a sweep call the same gap
"within noise" and the same verdict "high".
Plain numbers in, plain numbers out: each setting is a map from round to its time.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

NOISE_FLOOR = 0.02  # never call two settings different on less than this relative gap
COVERAGE = 0.75  # how sure the interval around a median ratio is to hold the true ratio
MARGIN = 0.025  # high: no other setting may be faster by more than this, at its interval's top
# Two-sided 95% Student t quantiles by degrees of freedom: ``high`` asks that another
# setting be no more than MARGIN faster even at the top of this stricter interval.
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}
RATIO_MEDIUM = 0.06  # relative range of round-by-round ratios above which: medium
RATIO_LOW = 0.15  # ... and low
SPREAD_MEDIUM = 0.25  # relative range of one setting's repeats (drift included): medium
SPREAD_LOW = 0.50  # ... and low

Rounds = Mapping[int, float]  # round -> the time measured in that round


def paired(a: Rounds, b: Rounds) -> list[float]:
    """``a``'s time over ``b``'s in each round both were measured in, in round order."""
    return [value / b[r] for r, value in sorted(a.items()) if r in b and b[r] > 0]


def spread(values: Sequence[float]) -> float:
    """Relative range of repeats: (max - min) / median (0 for fewer than two)."""
    if len(values) < 2:
        return 0.0
    return (max(values) - min(values)) / statistics.median(values)


def median_interval(values: Sequence[float]) -> tuple[float, float]:
    """An interval of order statistics that holds the true median with >= ``COVERAGE``.

    Distribution-free: ``[x_(k), x_(n-k+1)]`` covers the median with probability
    ``1 - 2 P(Binomial(n, 1/2) <= k - 1)``; the largest such ``k`` is used (the whole range
    for 3 to 5 values, the 2nd to 5th of 6), so the interval narrows as rounds are added.
    """
    xs = sorted(values)
    n = len(xs)
    k = 1
    while k + 1 <= (n + 1) // 2:
        tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n  # P(B <= k)
        if 1 - 2 * tail < COVERAGE:
            break
        k += 1
    return xs[k - 1], xs[n - k]


def compare(a: Rounds, b: Rounds) -> tuple[float, float, float, float]:
    """(median, low, high, noise) of ``a``'s time over ``b``'s.

    From the rounds' paired ratios when there are two or more: their median, their range,
    and as the noise how far below the median the true ratio may lie
    (:func:`median_interval`), at least ``NOISE_FLOOR``. Otherwise from the medians, the
    extremes of the repeats, and the larger relative range of the two.
    """
    ratios = paired(a, b)
    if len(ratios) >= 2:
        mid = statistics.median(ratios)
        low, _ = median_interval(ratios)
        return mid, min(ratios), max(ratios), max(mid - low, NOISE_FLOOR)
    av, bv = list(a.values()), list(b.values())
    return (
        statistics.median(av) / statistics.median(bv),
        min(av) / max(bv),
        max(av) / min(bv),
        max(spread(av), spread(bv), NOISE_FLOOR),
    )


def within_noise(ratio: float, noise: float) -> bool:
    """A time ``ratio`` times the fastest's is not a measured difference: less the noise, it
    is within ``NOISE_FLOOR`` of 1."""
    return ratio - noise <= 1 + NOISE_FLOOR


def measured_noise(chosen: Rounds, fastest: Rounds) -> float:
    """The noise the repeats of two settings showed, never a floor: how far below the median
    round-by-round ratio of ``chosen`` over ``fastest`` the interval reaches (without two
    shared rounds, the larger relative range of their repeats)."""
    ratios = paired(chosen, fastest)
    if len(ratios) < 2:
        return max(spread(list(chosen.values())), spread(list(fastest.values())))
    low, _ = median_interval(ratios)
    return max(statistics.median(ratios) - low, 0.0)


def may_be_faster(
    chosen: Rounds, other: Rounds, pooled_sd: float = 0.0, pooled_df: int = 0
) -> float:
    """How much faster ``other`` may be than ``chosen``: the top of a 95% interval of their
    round-by-round time ratio (chosen over other, geometric mean), less 1, with the larger of
    the pair's own sd and ``pooled_sd``. The t quantile is the pair's (rounds - 1 degrees of
    freedom) unless ``pooled_df`` says the pooled sd rests on more: a pair of two rounds
    alone would get t = 12.7, an interval too wide to clear a setting that lost both rounds
    by 10% on a quiet machine. Without two shared rounds, from the extremes of the repeats."""
    logs = [math.log(r) for r in paired(chosen, other)]
    if len(logs) < 2:
        return max(chosen.values()) / min(other.values()) - 1.0
    t = T95.get(max(len(logs) - 1, pooled_df), 2.0)
    sd = max(statistics.stdev(logs), pooled_sd)
    return math.exp(statistics.mean(logs) + t * sd / math.sqrt(len(logs))) - 1.0


def ratio_spread(chosen: Rounds, other: Rounds) -> float:
    """Relative range of the round-by-round ratios of two settings: the noise that pairing
    did not cancel (0 with fewer than two shared rounds)."""
    return spread(paired(chosen, other))
