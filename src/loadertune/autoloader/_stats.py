"""The probes' decision on plain lists: cheapest within noise of the fastest, and confidence.

The sweep's verdict rules (``hydra_plugins.loadertune_sweeper._verdict`` and ``_confidence``)
on AutoLoader's probes: the statistics and thresholds are the shared ones in
:mod:`loadertune.paired_stats`, so a tuning session and a sweep call the same gap "within
noise" and "high". What differs is what a setting is (a probe's key, its cost given by the
caller) and what the sweep alone can see (other work on the machine, pooled over settings).
"""

from __future__ import annotations

import statistics
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from loadertune.paired_stats import (
    MARGIN,
    NOISE_FLOOR,
    RATIO_LOW,
    RATIO_MEDIUM,
    SPREAD_LOW,
    SPREAD_MEDIUM,
    Rounds,
    compare,
    may_be_faster,
    ratio_spread,
    spread,
    within_noise,
)

K = TypeVar("K", bound=Hashable)  # what names a setting


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
        ratio, _, _, noise = compare(rounds, measured[fastest])
        if within_noise(ratio, noise):
            within.append((key, ratio, noise))
    chosen, ratio, noise = min(within, key=lambda t: (cost[t[0]], t[1]))
    return Choice(chosen, fastest, ratio, noise)


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
    pairing = max((ratio_spread(chosen, v) for v in others.values()), default=0.0)
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
