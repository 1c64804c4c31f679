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
from typing import Any

# The slowdown the verdict treats as none: a cheaper setting shown to be at most this much
# slower than the fastest is the pick (:func:`shown_as_fast`); one slower by more in every
# round leaves the race.
TOLERANCE = 0.02
COVERAGE = 0.75  # how sure the interval around a median ratio is to hold the true ratio
MARGIN = 0.025  # high: no other setting may be faster by more than this, at its interval's top
# Two-sided 95% Student t quantiles by degrees of freedom: ``high`` asks that another
# setting be no more than MARGIN faster even at the top of this stricter interval.
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}
# ... and two-sided 90% (one-sided 95%): "shown at most TOLERANCE slower", an equivalence test.
T90 = {1: 6.31, 2: 2.92, 3: 2.35, 4: 2.13, 5: 2.02, 6: 1.94, 7: 1.89, 8: 1.86, 9: 1.83}
T_BEYOND = {id(T95): 2.0, id(T90): 1.75}  # past the table's last degrees of freedom
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


def compare(a: Rounds, b: Rounds) -> tuple[float, float, float]:
    """(median, low, high) of ``a``'s time over ``b``'s: from the rounds' paired ratios when
    there are two or more (their median and range), otherwise the range from the extremes of
    the repeats, around the one shared round's ratio where there is one (it cancels that
    round's drift, which a ratio of medians over other rounds keeps), else the ratio of the
    medians. The noise the two showed is :func:`measured_noise`'s."""
    ratios = paired(a, b)
    if len(ratios) >= 2:
        return statistics.median(ratios), min(ratios), max(ratios)
    av, bv = list(a.values()), list(b.values())
    mid = ratios[0] if ratios else statistics.median(av) / statistics.median(bv)
    return mid, min(min(av) / max(bv), mid), max(max(av) / min(bv), mid)


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
    chosen: Rounds,
    other: Rounds,
    pooled_sd: float = 0.0,
    pooled_df: int = 0,
    quantiles: Mapping[int, float] = T95,
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
    t = _t(quantiles, max(len(logs) - 1, pooled_df))
    sd = max(statistics.stdev(logs), pooled_sd)
    return math.exp(statistics.mean(logs) + t * sd / math.sqrt(len(logs))) - 1.0


def _t(quantiles: Mapping[int, float], df: int) -> float:
    """The quantile for ``df`` degrees of freedom (the table's tail value beyond it)."""
    return quantiles.get(df, T_BEYOND.get(id(quantiles), 2.0))


def shown_as_fast(cheaper: Rounds, fastest: Rounds, pooled_sd: float = 0.0, df: int = 0) -> bool:
    """Whether the rounds show ``cheaper`` at most ``TOLERANCE`` slower than ``fastest``:
    the top of the one-sided 95% interval of its time ratio (:func:`may_be_faster` with
    :data:`T90`: an equivalence test's) within the tolerance, over two shared rounds at least.
    Failing to tell the two apart is not enough: on a noisy machine that would make the
    cheaper setting the pick however slow it is."""
    if len(paired(cheaper, fastest)) < 2:
        return False
    return may_be_faster(cheaper, fastest, pooled_sd, df, T90) <= TOLERANCE


def shown_slower(a: Rounds, b: Rounds, pooled_sd: float = 0.0, df: int = 0) -> bool:
    """Whether the rounds show ``a`` slower than ``b`` by more than ``TOLERANCE``: the bottom
    of the one-sided 95% interval of its time ratio above it, over two shared rounds."""
    logs = [math.log(r) for r in paired(a, b)]
    if len(logs) < 2:
        return False
    t = _t(T90, max(len(logs) - 1, df))
    sd = max(statistics.stdev(logs), pooled_sd)
    return statistics.mean(logs) - t * sd / math.sqrt(len(logs)) > math.log(1 + TOLERANCE)


def rounds_to_settle(
    a: Rounds,
    b: Rounds,
    most: int,
    pooled_sd: float = 0.0,
    pooled_df: int = 0,
    bound: float = TOLERANCE,
    quantiles: Mapping[int, float] = T90,
) -> int | None:
    """The fewest rounds, up to ``most``, after which the one-sided 95% interval of
    ``a``'s time over ``b``'s would lie wholly on one side of ``1 + TOLERANCE`` (``a`` shown
    at most that much slower, or shown slower by more), if their ratio and its scatter stay
    what the rounds so far show; None when even ``most`` rounds would not: rounds spent on
    the pair buy nothing. ``bound`` and ``quantiles`` ask the same of another line (the
    label's: ``MARGIN`` at a two-sided 95% interval, :data:`T95`).
    """
    logs = [math.log(r) for r in paired(a, b)]
    if len(logs) < 2:
        return len(logs) + 2 if len(logs) + 2 <= most else None
    mean = statistics.mean(logs)
    sd = max(statistics.stdev(logs), pooled_sd)
    gap = abs(mean - math.log(1 + bound))
    grow = pooled_df / (len(logs) - 1)  # the pooled fit's degrees of freedom per round
    for n in range(len(logs), most + 1):
        t = _t(quantiles, max(n - 1, round(grow * (n - 1))))
        if t * sd / math.sqrt(n) < gap:
            return n
    return None


def round_gain(pick: Rounds, rival: Rounds, pooled_sd: float = 0.0) -> float:
    """The throughput one more round of the pair is expected to win back (a fraction): the
    expected value of its information for the choice between them.

    With ``m`` the mean log time ratio of the pick over the rival and its standard error
    falling from ``s/sqrt(n)`` to ``s/sqrt(n+1)`` (``s`` the pair's sd, at least
    ``pooled_sd``), the round moves the estimate by ``v = s * sqrt(1/n - 1/(n+1))`` (sd),
    and the loss it can save is ``v * L(|m| / v)``, ``L`` the unit normal loss function
    (what the normal preposterior analysis of a two-way choice gives). Large while the pair
    is close and scattered and its rounds few; it falls as rounds accumulate, so a rival no
    interval can settle still earns rounds while they are likely to change the pick."""
    logs = [math.log(r) for r in paired(pick, rival)]
    if len(logs) < 2:
        return math.inf  # nothing known of their scatter yet
    n, sd = len(logs), max(statistics.stdev(logs), pooled_sd)
    v = sd * math.sqrt(1 / n - 1 / (n + 1))
    if v <= 0:
        return 0.0
    z = abs(statistics.mean(logs)) / v
    loss = math.exp(-z * z / 2) / math.sqrt(2 * math.pi) - z * 0.5 * math.erfc(z / math.sqrt(2))
    return v * loss


def pooled_log_sd(times: Mapping[Any, Rounds]) -> tuple[float, int]:
    """The sd of one log time ratio that all settings' rounds show together, and its degrees
    of freedom.

    A two-way fit over every round two or more settings were measured in (log time = setting
    + round + noise; a setting that left the race keeps the rounds it ran): the residuals
    pool what each round's drift does not explain, over (cells - settings - rounds + 1)
    degrees of freedom, so three lucky rounds of one pair cannot pass for a quiet machine
    when the other settings scattered. A ratio of two settings carries the noise of both:
    sqrt(2) x the residual sd. (0, 0) when there is too little to fit.
    """
    cells = _fit_cells(times)
    rows = {k for k, _ in cells}
    cols = {r for _, r in cells}
    df = len(cells) - len(rows) - len(cols) + 1
    if len(rows) < 2 or df < 1:
        return 0.0, 0
    row, col = _two_way_fit(cells)
    sq = sum((x - row[k] - col[r]) ** 2 for (k, r), x in cells.items())
    return math.sqrt(2 * sq / df), df


FIT_SWEEPS = 20  # backfitting passes of the two-way fit; a full table needs one


def _two_way_fit(
    cells: Mapping[tuple[Any, int], float],
) -> tuple[dict[Any, float], dict[int, float]]:
    """Least squares fit of ``cells`` ({(setting, round): log time}, missing cells allowed):
    log time = setting + round, by backfitting (settings first, so a setting that shares no
    round keeps its mean). The settings' effects, and the rounds'."""
    row = {k: 0.0 for k, _ in cells}
    col = {r: 0.0 for _, r in cells}
    for _ in range(FIT_SWEEPS):
        for k in row:
            row[k] = statistics.mean(x - col[q] for (j, q), x in cells.items() if j == k)
        for r in col:
            col[r] = statistics.mean(x - row[k] for (k, q), x in cells.items() if q == r)
    return row, col


def round_free_times(times: Mapping[Any, Rounds]) -> dict[Any, float]:
    """Each measured setting's log time with the rounds' effects taken out: the two-way fit
    of every measurement (log time = setting + round, :func:`_two_way_fit`).

    Settings measured in different rounds (one left after two rounds, the pick measured in
    four) then compare as if measured in the same ones: a round the machine was quiet in
    does not make the settings it measured look faster. Over a full table, each setting's
    mean log time. A round that measured one setting tells nothing about the others and
    moves nothing; a setting that shares no round keeps its own mean.

    Priced on simulated verdicts (benchmarks/verdict_confidence.py, docs/verdict.md) against
    each setting's median time and against the same fit by medians (Tukey's median polish):
    the fewest wrong picks and the lowest regret where measurements scatter.
    """
    row, _ = _two_way_fit(
        {(k, r): math.log(t) for k, v in times.items() for r, t in v.items() if v}
    )
    return row


def _fit_cells(times: Mapping[Any, Rounds]) -> dict[tuple[Any, int], float]:
    """Log times of the settings with two or more rounds, in the rounds that two or more of
    them share: the cells the two-way fit can use."""
    kept = {k: v for k, v in times.items() if len(v) >= 2}
    count: dict[int, int] = {}
    for v in kept.values():
        for r in v:
            count[r] = count.get(r, 0) + 1
    return {(k, r): math.log(t) for k, v in kept.items() for r, t in v.items() if count[r] >= 2}


def ratio_spread(chosen: Rounds, other: Rounds) -> float:
    """Relative range of the round-by-round ratios of two settings: the noise that pairing
    did not cancel (0 with fewer than two shared rounds)."""
    return spread(paired(chosen, other))
