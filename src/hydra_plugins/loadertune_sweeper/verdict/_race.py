"""The verdict's rounds: which settings each one measures, when they stop, what they cost.

The first rounds measure every candidate; from then on a round measures only what can still
change the pick or lift its label (:func:`._confidence.next_round`), so settings that can no
longer matter leave together. What a round costs is timed here, and with
``hydra.sweeper.train_hours`` a rival's round must be expected to win back its own seconds
over the training (:class:`Pricing`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from loadertune import decision

from . import _candidates
from ._candidates import Candidate
from ._confidence import next_round

MIN_ROUNDS = 3  # the fewest rounds whose pick can be ``high`` (decision.shortfalls)
RACE_ROUNDS = 2  # rounds that measure every setting (but one far behind): the race needs two
HOUR_S = 3600.0


@dataclass
class Pricing:
    """What the verdict's rounds cost, and what a rival's round must be expected to buy.

    Without ``train_hours``, :data:`loadertune.decision.MIN_GAIN` of throughput. With it, the
    seconds a round for one rival costs (it and the pick, at the mean seconds a measurement
    took so far) over the training's seconds: a tenth of a percent of a ten-hour run is 36 s,
    of a one-hour run 3.6 s.
    """

    train_hours: float | None = None
    clock: Callable[[], float] = field(default=time.perf_counter)
    spent_s: float = 0.0  # seconds the rounds took, in all
    measured: int = 0  # measurements they made

    def timed(self, measure_round: Callable[[int, list[Candidate]], bool], n: int,
              which: list[Candidate]) -> bool:  # fmt: skip
        """Run round ``n`` of ``which`` through ``measure_round``, counting its seconds."""
        start = self.clock()
        try:
            return measure_round(n, which)
        finally:
            self.spent_s += self.clock() - start
            self.measured += len(which)

    def min_gain(self) -> float:
        """The share of throughput a rival's next round must be expected to win back."""
        if self.train_hours is None or not self.measured:
            return decision.MIN_GAIN
        return 2 * self.spent_s / self.measured / (self.train_hours * HOUR_S)


def run_rounds(
    cands: list[Candidate],
    repeats: int,
    measure_round: Callable[[int, list[Candidate]], bool],
    note: Callable[[str], None],
    cpus: int,
    pricing: Pricing | None = None,
) -> int | None:
    """Run rounds while one can still change the pick or lift its label; how many ran
    (None: ``measure_round``, which measures the settings given once each, said stop).

    The first ``RACE_ROUNDS`` measure every setting still in the race (it needs two). After
    the first, a setting far behind the fastest in it and in the search leaves
    (:func:`._candidates.far_behind`); after each, one that lost every round to the fastest
    by more than the tolerance (:func:`._candidates.out_of_race`). From then on each round
    measures only what it can still buy (:func:`._confidence.next_round`), the others leave
    together, and the rounds stop once nothing is worth one, or at twice ``repeats``. A
    setting a round of which failed (``Candidate.failed``) leaves the race at once. Each
    round measures its settings in :func:`rotated` order (of ``cands``' order, whichever the
    pick); ``pricing`` times the rounds and prices a rival's next one.
    """
    price = pricing or Pricing()
    alive, rounds, why = list(cands), 0, ""
    least, most = min(repeats, MIN_ROUNDS), 2 * repeats
    while rounds < most:
        which = alive
        if rounds >= RACE_ROUNDS:
            step = next_round(cands, least, most, cpus, price.min_gain())
            for c, reason in step.leave:
                _leave(c, alive, rounds, reason, note)
            chosen = {id(c) for c in step.measure}  # in the candidates' order, for rotated
            which, why = [c for c in cands if id(c) in chosen], step.why
            if not which:
                break
            if rounds >= repeats:
                names = ", ".join(f"trial {c.trial.number}" for c in which)
                note(f"verdict: one more round of {names}: it can still change the pick")
        if not price.timed(measure_round, rounds, rotated(which, rounds)):
            return None
        rounds += 1
        for c in [c for c in alive if c.failed]:  # never the pick, whatever its other rounds
            _leave(c, alive, rounds, c.failed_why, note)
        if not alive:
            why = "no setting left to recommend: every one failed a round"
            break
        for c in _candidates.out_of_race(alive):
            _leave(c, alive, rounds, _candidates.LEFT_RACE, note)
        for c in _candidates.far_behind(alive):
            _leave(c, alive, rounds, _candidates.LEFT_FAR, note)
    note(
        f"verdict: {why or 'as many rounds as allowed'}, after {rounds} round"
        f"{'s' * (rounds != 1)} ({price.measured} measurements, {price.spent_s:.0f} s)"
    )
    return rounds


def _leave(
    c: Candidate, alive: list[Candidate], rounds: int, why: str, note: Callable[[str], None]
) -> None:
    """``c`` leaves the race after ``rounds`` rounds, for ``why``."""
    c.left_after, c.left_why = rounds, why
    alive.remove(c)
    note(f"verdict: trial {c.trial.number} ({c.name or 'searched'}) leaves the race: {why} "
         f"({rounds} rounds)")  # fmt: skip


def rotated(which: list[Candidate], round_: int) -> list[Candidate]:
    """``which`` in round ``round_``'s order: every second round the order is reversed, and
    every two rounds it starts one setting further on (three settings: all six orders in six
    rounds), so over the rounds each setting takes each place and follows different others.

    In a fixed order, whatever depends on a setting's place (the machine speeding up or
    slowing down across a round, the setting measured right after the one with the most
    workers) would fall on the same setting in every round, where the round-by-round ratios
    cannot cancel it; rotating alone keeps every setting's predecessor."""
    if not which:
        return which
    k = (round_ // 2) % len(which)
    order = [*which[k:], *which[:k]]
    return order[::-1] if round_ % 2 else order
