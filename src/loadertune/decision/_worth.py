"""What another round can still buy: the settings whose rounds can change the pick.

A round is worth running for a setting only while, at the scatter the rounds have shown, the
rounds still allowed can settle a question that moves the pick: a rival that may beat the
pick by more than ``TOLERANCE``, or a cheaper setting that may yet be shown as fast. A setting
shown no more than the tolerance faster than the pick, shown slower, or too close to tell
apart within the rounds allowed is done: more of its rounds buy nothing, and it leaves
together with the others alike. Plain maps in (:mod:`._choice`'s), so the sweep's verdict
and AutoLoader can both use it.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from loadertune.decision._choice import Choice, recommend
from loadertune.measure import (
    TOLERANCE,
    Rounds,
    may_be_faster,
    paired,
    round_gain,
    rounds_to_settle,
    shown_slower,
)

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

K = TypeVar("K", bound=Hashable)

RIVAL = f"may be faster than the pick by more than {TOLERANCE:.0%}"
CHEAPER = "cheaper than the pick, and may yet be shown as fast"
SETTLED = f"shown no more than {TOLERANCE:.0%} faster than the pick"
SLOWER = f"shown slower than the fastest by more than {TOLERANCE:.0%}"
STUCK = "too close to the pick to tell apart in the rounds allowed, at the scatter measured"
SURE_ROUNDS = 3  # rounds a pair shares before its scatter is sure enough to call it stuck
MIN_GAIN = 0.005  # a rival's round must be expected to win back this share of throughput


@dataclass(frozen=True)
class Outlook(Generic[K]):
    """The pick as it stands, and which settings another round is worth."""

    choice: Choice[K]
    open: dict[K, str]  # worth another round, and why (the pick and the fastest included)
    done: dict[K, str]  # not worth one, and why


def worth_a_round(
    times: Mapping[K, Rounds],
    cost: Mapping[K, SupportsRichComparison],
    most: int,
    memory: Mapping[K, float] | None = None,
    noise: tuple[float, int] | None = None,
    min_gain: float = MIN_GAIN,
) -> Outlook[K]:
    """Which measured settings another round is worth, within ``most`` rounds in all.
    ``noise`` as :func:`._choice.recommend`'s. A pair is called too close to tell apart
    only on a scatter measured well enough: ``SURE_ROUNDS`` shared rounds (the scatter of
    two says almost anything, a pooled fit's too: it drew ties apart in simulated verdicts)."""
    measured = {k: v for k, v in times.items() if v}
    choice = recommend(measured, cost, memory, noise)
    pick, best = measured[choice.chosen], measured[choice.fastest]
    sd, df = choice.noise
    open_: dict[K, str] = {}
    done: dict[K, str] = {}
    for key, rounds in measured.items():
        if key in (choice.chosen, choice.fastest):
            continue
        sure = len(paired(rounds, pick)) >= SURE_ROUNDS
        if shown_slower(rounds, best, sd, df):
            done[key] = SLOWER
        elif key in choice.unshown:  # cheaper: the pick if the rounds show it as fast
            stuck = sure and rounds_to_settle(rounds, best, most, sd, df) is None
            (done if stuck else open_)[key] = STUCK if stuck else CHEAPER
        elif may_be_faster(pick, rounds, sd, df) <= TOLERANCE:
            done[key] = SETTLED
        elif round_gain(pick, rounds, sd) < min_gain:
            done[key] = STUCK
        else:
            open_[key] = RIVAL
    if open_:
        open_ = {choice.chosen: "the pick", choice.fastest: "the fastest", **open_}
    return Outlook(choice, open_, done)
