"""The probes' statistics on plain lists: paired ratios, cheapest within noise, confidence.

The same rules as the sweep's verdict (``hydra_plugins.loadertune_sweeper._verdict`` and
``_confidence``), restated on lists of per-round figures: those modules work on Optuna trials
and live in the sweeper package above ``loadertune``, which must not import them. Each
candidate is measured once per round, the rounds interleaved, so the ratio of two candidates'
times within a round cancels what the machine did in that round. The thresholds are the
sweep's, so a tuning session and a sweep call the same gap "within noise" and "high".
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

NOISE_FLOOR = 0.02  # never call two settings different on less than this relative gap
COVERAGE = 0.75  # how sure the interval around a median ratio is to hold the true ratio
MARGIN = 0.025  # high: no other setting may be faster by more than this, at its interval's top
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}
RATIO_MEDIUM, RATIO_LOW = 0.06, 0.15  # spread of round-by-round ratios: medium, low
SPREAD_MEDIUM, SPREAD_LOW = 0.25, 0.50  # spread of one setting's repeats: medium, low

Rounds = Mapping[int, float]  # round -> time per batch (s) measured in that round
K = TypeVar("K", bound=Hashable)  # what names a setting


def paired(a: Rounds, b: Rounds) -> list[float]:
    """``a``'s time over ``b``'s in each round both were measured in."""
    return [value / b[r] for r, value in sorted(a.items()) if r in b and b[r] > 0]


def spread(values: Sequence[float]) -> float:
    """Relative range of repeats: (max - min) / median (0 for fewer than two)."""
    if len(values) < 2:
        return 0.0
    return (max(values) - min(values)) / statistics.median(values)


def median_interval(values: Sequence[float]) -> tuple[float, float]:
    """Order statistics ``[x_(k), x_(n-k+1)]`` that hold the true median with >= COVERAGE."""
    xs = sorted(values)
    n = len(xs)
    k = 1
    while k + 1 <= (n + 1) // 2:
        tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
        if 1 - 2 * tail < COVERAGE:
            break
        k += 1
    return xs[k - 1], xs[n - k]


def compare(a: Rounds, b: Rounds) -> tuple[float, float]:
    """(median ratio, noise) of ``a``'s time over ``b``'s, as the sweep's verdict compares.

    The noise is how far below the median the true ratio may lie (at least NOISE_FLOOR);
    without two shared rounds, the larger relative range of the two settings' repeats.
    """
    ratios = paired(a, b)
    if len(ratios) >= 2:
        mid = statistics.median(ratios)
        low, _ = median_interval(ratios)
        return mid, max(mid - low, NOISE_FLOOR)
    noise = max(spread(list(a.values())), spread(list(b.values())), NOISE_FLOOR)
    return statistics.median(a.values()) / statistics.median(b.values()), noise


@dataclass(frozen=True)
class Choice(Generic[K]):
    """The cheapest setting within noise of the fastest."""

    chosen: K
    fastest: K
    ratio: float  # chosen's median time over the fastest's (1.0 when they are one)
    noise: float  # the noise the decision allowed for


def recommend(times: Mapping[K, Rounds], cost: Mapping[K, float]) -> Choice[K]:
    """Cheapest (lowest ``cost``) setting whose time is within noise of the fastest.

    Within noise: its median round-by-round ratio to the fastest, less the noise, is within
    NOISE_FLOOR of 1, so the gap is not a measured difference.
    """
    measured = {k: v for k, v in times.items() if v}
    fastest = min(measured, key=lambda k: statistics.median(measured[k].values()))
    within: list[tuple[K, float, float]] = [(fastest, 1.0, NOISE_FLOOR)]
    for key, rounds in measured.items():
        if key == fastest:
            continue
        ratio, noise = compare(rounds, measured[fastest])
        if ratio - noise <= 1 + NOISE_FLOOR:
            within.append((key, ratio, noise))
    chosen, ratio, noise = min(within, key=lambda t: (cost[t[0]], t[1]))
    return Choice(chosen, fastest, ratio, noise)


def may_be_faster(chosen: Rounds, other: Rounds) -> float:
    """How much faster ``other`` may be than ``chosen``: the top of a 95% t-interval of their
    round-by-round log ratio, less 1 (from the extremes without two shared rounds)."""
    logs = [math.log(r) for r in paired(chosen, other)]
    if len(logs) < 2:
        return max(chosen.values()) / min(other.values()) - 1.0
    t = T95.get(len(logs) - 1, 2.0)
    sd = statistics.stdev(logs)
    return math.exp(statistics.mean(logs) + t * sd / math.sqrt(len(logs))) - 1.0


@dataclass(frozen=True)
class Assurance:
    """``high``, ``medium`` or ``low``, and the sentence that says why."""

    level: str
    why: str
    unsettled: tuple[object, ...] = ()


def assess(choice: Choice[K], times: Mapping[K, Rounds]) -> Assurance:
    """How sure the choice is, by the sweep's rules (less the busy-machine check)."""
    chosen = times[choice.chosen]
    others = {k: v for k, v in times.items() if v and k != choice.chosen}
    unsettled = [k for k, v in others.items() if may_be_faster(chosen, v) > MARGIN]
    reasons: list[tuple[str, str]] = []
    n = len(chosen)
    if n < 3:
        reasons.append(("low" if n < 2 else "medium", f"the choice was measured {n} time(s)"))
    pairing = max((spread(paired(chosen, v)) for v in others.values()), default=0.0)
    if pairing > RATIO_MEDIUM:
        level = "low" if pairing > RATIO_LOW else "medium"
        reasons.append((level, f"round-by-round ratios to it spread {pairing:.0%}"))
    drift = max(spread(list(chosen.values())), spread(list(times[choice.fastest].values())))
    if drift > SPREAD_MEDIUM:
        level = "low" if drift > SPREAD_LOW else "medium"
        reasons.append((level, f"the machine's speed drifted: repeats spread {drift:.0%}"))
    if unsettled:
        most = max(may_be_faster(chosen, others[k]) for k in unsettled)
        names = ", ".join(str(k) for k in unsettled)
        upto = f"up to {most:.0%}" if most < 1 else "more than 100% (too few rounds)"
        reasons.append(("medium", f"{names} may still be faster by {upto}"))
    if not reasons:
        return Assurance(
            "high",
            f"No other setting can be more than {MARGIN:.1%} faster (95% interval); "
            f"round-by-round ratios agree within {pairing:.0%}.",
        )
    level = "low" if any(lv == "low" for lv, _ in reasons) else "medium"
    why = "; ".join(text for _, text in reasons) + "."
    return Assurance(level, why[0].upper() + why[1:], tuple(unsettled))
