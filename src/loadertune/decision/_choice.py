"""The recommendation: the cheapest setting shown to be as fast as the fastest, over paired
rounds.

Each setting is a key mapped to its times by round (``{round: time}``) and a cost the caller
gives (a number or a tuple: lower is cheaper). The fastest is the lowest time once the
rounds' effects are taken out (:func:`loadertune.measure._paired_stats.round_free_times`), so a
setting measured in fewer rounds is not ranked by which rounds those were. A
cheaper setting is the pick only when the rounds *show* it as fast: the top of the 95%
interval of its time over the fastest's within ``TOLERANCE``
(:func:`loadertune.measure._paired_stats.shown_as_fast`, with the noise all settings' rounds show
together as the least). Rounds too noisy to tell two settings apart leave the faster one
standing, and the choice says what each cheaper setting might cost. A setting that lost
every round by more than ``TOLERANCE`` is out of the race (:func:`out_of_race`).

Memory, where the caller gives it, is a cost only past :data:`MEMORY_MARGIN`: between
settings that differ by a few batches in flight (a ``prefetch_factor``), which a process
tree's memory readings barely tell apart, the faster is the pick, not the one whose reading
came out a few MB lower.
"""

from __future__ import annotations

import statistics
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from loadertune.measure import (
    TOLERANCE,
    Rounds,
    may_be_faster,
    paired,
    pooled_log_sd,
    round_free_times,
    shown_as_fast,
    shown_slower,
)

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

K = TypeVar("K", bound=Hashable)  # what names a setting


@dataclass(frozen=True)
class Unshown:
    """A setting cheaper than the pick that the rounds did not show as fast."""

    ratio: float  # its median round-by-round time over the fastest's
    may_cost: float  # how much slower it may be: the top of that ratio's 95% interval, less 1


@dataclass(frozen=True)
class Choice(Generic[K]):
    """The cheapest setting shown as fast as the fastest."""

    chosen: K
    fastest: K
    ratio: float  # chosen's median time over the fastest's (1.0 when they are one)
    may_cost: float  # how much slower than the fastest the chosen may be (0 for the fastest)
    noise: tuple[float, int] = (0.0, 0)  # the pooled log-ratio sd and its degrees of freedom
    # Cheaper than the pick, neither shown as fast nor shown slower: it may be as fast.
    unshown: dict[K, Unshown] = field(default_factory=dict)


def fastest(times: Mapping[K, Rounds]) -> K:
    """The setting with the lowest time, the rounds' effects taken out (the first of equals),
    of those measured."""
    level: dict[K, float] = round_free_times(times)
    return min(level, key=level.__getitem__)


# Less memory makes a setting cheaper only when it saves at least this share of the other's.
MEMORY_MARGIN = 0.10


def cheaper(a: float, b: float, mem_a: float = 0.0, mem_b: float = 0.0) -> bool:
    """Whether a setting of cost ``a`` (memory ``mem_a``) is cheaper than one of cost ``b``
    (``mem_b``): a lower cost, or the same cost and less memory by :data:`MEMORY_MARGIN`."""
    return a < b if a != b else _lighter(mem_a, mem_b)


def _lighter(mem_a: float, mem_b: float) -> bool:
    return mem_a < mem_b * (1 - MEMORY_MARGIN)


def median_ratio(a: Rounds, b: Rounds) -> float:
    """``a``'s time over ``b``'s: the median of their round-by-round ratios (of their
    medians without a shared round)."""
    ratios = paired(a, b)
    if ratios:
        return statistics.median(ratios)
    return statistics.median(a.values()) / statistics.median(b.values())


def recommend(
    times: Mapping[K, Rounds],
    cost: Mapping[K, SupportsRichComparison],
    memory: Mapping[K, float] | None = None,
    noise: tuple[float, int] | None = None,
) -> Choice[K]:
    """The cheapest (lowest ``cost``) setting shown as fast as the fastest.

    ``noise``: the pooled log-ratio sd and its degrees of freedom to judge with, at least
    (:func:`loadertune.measure._paired_stats.pooled_log_sd`; by default over ``times``; a caller may
    pool over more, the settings that left the race included).

    With ``memory``, of the settings shown as fast at the lowest cost, those within
    :data:`MEMORY_MARGIN` of the least memory are alike, and the fastest of them (at the
    median of its round-by-round ratios) is the pick. Without it, of equally cheap settings,
    the fastest itself, else the first in ``times``. Settings with no rounds are left out.
    """
    measured = {k: v for k, v in times.items() if v}
    best = fastest(measured)
    noise = pooled_log_sd(measured) if noise is None else noise
    mem = memory or {}
    shown = [best] + [
        k for k, v in measured.items() if k != best and shown_as_fast(v, measured[best], *noise)
    ]
    least = min(cost[k] for k in shown)
    lowest = [k for k in shown if cost[k] == least]
    if memory is None:
        chosen = lowest[0]
    else:
        light = min(mem[k] for k in lowest)
        alike = [k for k in lowest if not _lighter(light, mem[k])]
        chosen = min(alike, key=lambda k: median_ratio(measured[k], measured[best]))
    unshown = {
        k: Unshown(median_ratio(v, measured[best]), may_be_faster(v, measured[best], *noise))
        for k, v in measured.items()
        if k not in shown
        and not shown_slower(v, measured[best], *noise)
        and cheaper(cost[k], cost[chosen], mem.get(k, 0.0), mem.get(chosen, 0.0))  # type: ignore[arg-type]
    }
    ratio = median_ratio(measured[chosen], measured[best]) if chosen != best else 1.0
    slower = max(may_be_faster(measured[chosen], measured[best], *noise), 0.0)
    return Choice(chosen, best, ratio, slower if chosen != best else 0.0, noise, unshown)


def out_of_race(times: Mapping[K, Rounds]) -> list[K]:
    """The settings that lost every round to the fastest by more than ``TOLERANCE``, over
    two or more shared rounds: more rounds of them are unlikely to change the pick.

    A plain count, not an interval: in simulated verdicts (benchmarks/verdict_confidence.py,
    docs/verdict.md) it sends settings away sooner than asking their best round to clear a
    75% interval, and the picks got better, not worse. A setting that left still counts
    against ``high`` (:func:`loadertune.decision.findings`).
    """
    measured = {k: v for k, v in times.items() if v}
    if len(measured) < 2:
        return []
    best = fastest(measured)
    out = []
    for key, rounds in measured.items():
        ratios = paired(rounds, measured[best])
        if key != best and len(ratios) >= 2 and min(ratios) > 1 + TOLERANCE:
            out.append(key)
    return out
