"""The recommendation: the cheapest setting within noise of the fastest, over paired rounds.

Each setting is a key mapped to its times by round (``{round: time}``) and a cost the caller
gives (a number or a tuple: lower is cheaper). The fastest is the lowest median time; another
setting is within noise of it when the median of their round-by-round ratios, less the noise,
is within ``NOISE_FLOOR`` of 1 (:func:`loadertune.paired_stats.within_noise`), and out of the
race (:func:`out_of_race`) when it lost every round by more than ``NOISE_FLOOR``.

Memory, where the caller gives it, is a cost only past :data:`MEMORY_MARGIN`: between
settings that differ by a few batches in flight (a ``prefetch_factor``), which a process
tree's memory readings barely tell apart, the faster is the pick, not the one whose reading
came out a few MB lower.
"""

from __future__ import annotations

import statistics
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from loadertune.paired_stats import NOISE_FLOOR, Rounds, compare, paired, within_noise

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

K = TypeVar("K", bound=Hashable)  # what names a setting


@dataclass(frozen=True)
class Choice(Generic[K]):
    """The cheapest setting within noise of the fastest."""

    chosen: K
    fastest: K
    ratio: float  # chosen's median time over the fastest's (1.0 when they are one)
    noise: float  # the noise the decision allowed for: measured, at least NOISE_FLOOR


def fastest(times: Mapping[K, Rounds]) -> K:
    """The setting with the lowest median time (the first of equals), of those measured."""
    measured = {k: v for k, v in times.items() if v}
    return min(measured, key=lambda k: statistics.median(measured[k].values()))


# Less memory makes a setting cheaper only when it saves at least this share of the other's.
MEMORY_MARGIN = 0.10


def cheaper(a: float, b: float, mem_a: float = 0.0, mem_b: float = 0.0) -> bool:
    """Whether a setting of cost ``a`` (memory ``mem_a``) is cheaper than one of cost ``b``
    (``mem_b``): a lower cost, or the same cost and less memory by :data:`MEMORY_MARGIN`."""
    return a < b if a != b else _lighter(mem_a, mem_b)


def _lighter(mem_a: float, mem_b: float) -> bool:
    return mem_a < mem_b * (1 - MEMORY_MARGIN)


def recommend(
    times: Mapping[K, Rounds],
    cost: Mapping[K, SupportsRichComparison],
    memory: Mapping[K, float] | None = None,
) -> Choice[K]:
    """Cheapest (lowest ``cost``) setting whose time is within noise of the fastest.

    With ``memory``, of the settings within noise at the lowest cost, those within
    :data:`MEMORY_MARGIN` of the least memory are alike, and the fastest of them (at the
    median of its round-by-round ratios) is the pick. Without it, of equally cheap settings,
    the fastest itself, else the first in ``times``. Settings with no rounds are left out.
    """
    measured = {k: v for k, v in times.items() if v}
    best = fastest(measured)
    within: list[tuple[K, float, float]] = [(best, 1.0, NOISE_FLOOR)]
    for key, rounds in measured.items():
        if key == best:
            continue
        ratio, _, _, noise = compare(rounds, measured[best])
        if within_noise(ratio, noise):
            within.append((key, ratio, noise))
    least = min(cost[t[0]] for t in within)
    lowest = [t for t in within if cost[t[0]] == least]
    if memory is None:
        chosen, ratio, noise = lowest[0]
    else:
        light = min(memory[t[0]] for t in lowest)
        alike = [t for t in lowest if not _lighter(light, memory[t[0]])]
        chosen, ratio, noise = min(alike, key=lambda t: t[1])
    return Choice(chosen, best, ratio, noise)


def out_of_race(times: Mapping[K, Rounds]) -> list[K]:
    """The settings that lost every round to the fastest by more than ``NOISE_FLOOR``, over
    two or more shared rounds: more rounds of them are unlikely to change the pick.

    A plain count, not an interval: in simulated verdicts (benchmarks/verdict_confidence.py,
    docs/verdict.md) it sends settings away sooner than asking their best round to clear a
    75% interval, and the picks got better, not worse: a setting that keeps losing is one the
    cheapest-within-noise rule would otherwise pick on a lucky round. A setting that left
    still counts against ``high`` (:func:`loadertune.decision.findings`).
    """
    measured = {k: v for k, v in times.items() if v}
    if len(measured) < 2:
        return []
    best = fastest(measured)
    out = []
    for key, rounds in measured.items():
        ratios = paired(rounds, measured[best])
        if key != best and len(ratios) >= 2 and min(ratios) > 1 + NOISE_FLOOR:
            out.append(key)
    return out
