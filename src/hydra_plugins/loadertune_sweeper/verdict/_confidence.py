"""How sure the verdict is: ``high``, ``medium`` or ``low``, with the sentence that says why.

A recommendation is only as good as the measurements behind it. Three things can make it
wrong on a shared machine: another setting that may really be faster than the recommended
one (the round-by-round ratios do not rule it out), repeats that scatter, and other work that
took the CPUs while settings were timed. ``high`` needs all three clear: every other setting
measured again is at most ``MARGIN`` faster than the recommendation even at the top of
its interval, repeats agree within ``SPREAD_MEDIUM``, and other processes left the CPUs
alone during the verdict and the search. A wrong pick labelled ``high`` is the one outcome
the thresholds are set against: each can only lower the label.

The rules on the rounds are :mod:`loadertune.decision`'s (AutoLoader's too); this room adapts
the candidates to them and adds what only a sweep sees: other work on the machine, during
the verdict and the search, and the noise pooled over every setting measured again.
"""

from __future__ import annotations

import math
import statistics
from typing import TypeAlias

from loadertune import decision
from loadertune.decision import Confidence, Shortfall
from loadertune.paired_stats import MARGIN

from . import _candidates
from ._candidates import Candidate, Recommendation, recommend, rounds_of, unsure

Assurance: TypeAlias = decision.Assurance[Candidate]  # the core's, naming candidates as open

FASTER_BY = 0.05  # a pick more than this much slower than another setting is a wrong pick
BUSY_MEDIUM = 0.10  # share of the usable CPUs other work took above which: medium
BUSY_LOW = 0.35  # ... and low


def busy_share(windows: list[tuple[float, float]], cpus: int) -> float:
    """Median share of the usable CPUs' capacity that other work and steal took (0..1), over
    windows given as (other CPU %, steal %) of one core."""
    if not windows:
        return 0.0
    return statistics.median((o + s) / (100.0 * max(cpus, 1)) for o, s in windows)


def verdict_windows(cands: list[Candidate]) -> list[tuple[float, float]]:
    """(other CPU %, steal %) of every verdict measurement."""
    return [
        (other, steal)
        for c in cands
        for other, steal in zip(
            c.other_cpu_percent, c.steal_percent or [0.0] * len(c.other_cpu_percent), strict=True
        )
    ]


def pooled_ratio_sd(cands: list[Candidate]) -> tuple[float, int]:
    """The sd of one log time ratio that all candidates' repeats show together, and its
    degrees of freedom.

    A two-way fit over the rounds every candidate was measured in (log time = setting +
    round + noise): the residuals pool what each round's drift does not explain, over
    (settings - 1) x (rounds - 1) degrees of freedom, so three lucky rounds of one pair
    cannot pass for a quiet machine when the other settings scattered. A ratio of two
    settings carries the noise of both: sqrt(2) x the residual sd. (0, 0) when there is too
    little to fit.
    """
    measured = [c for c in cands if c.values]
    shared = set.intersection(*(set(c.by_round) for c in measured))
    rounds = sorted(shared)
    if len(measured) < 2 or len(rounds) < 2:
        return 0.0, 0
    table = [[math.log(c.by_round[r]) for r in rounds] for c in measured]
    rows = [statistics.mean(row) for row in table]
    cols = [statistics.mean(col) for col in zip(*table, strict=True)]
    grand = statistics.mean(rows)
    residuals = [
        x - rows[i] - cols[j] + grand for i, row in enumerate(table) for j, x in enumerate(row)
    ]
    df = (len(measured) - 1) * (len(rounds) - 1)
    return math.sqrt(2 * sum(r * r for r in residuals) / df), df


def assess(
    rec: Recommendation,
    cands: list[Candidate],
    cpus: int,
    repeats: int,
    search_busy: list[float] | None = None,
) -> Assurance:
    """The confidence in ``rec`` (:mod:`loadertune.decision`), with the sweep's own checks:
    the noise pooled over every setting measured again, and other work on the machine.
    ``search_busy``: each search trial's busy share (0..1). A setting that left the race
    (it lost every round by more than the noise floor) is no risk to the pick and has fewer
    rounds: it is checked only for whether it may still be faster, over the rounds it ran,
    with the noise every candidate's shared rounds show (:func:`loadertune.decision.findings`)."""
    measured = _candidates.in_race(cands)
    left = [c for c in cands if c.values and c.left_after is not None]
    pooled, _ = pooled_ratio_sd(measured)
    everyone = measured + left
    at = {id(c): i for i, c in enumerate(measured)}
    f = decision.findings(
        rounds_of(measured),
        at[id(rec.chosen)],
        at[id(rec.fastest)],
        pooled,
        left={len(measured) + i: c.by_round for i, c in enumerate(left)},
        left_noise=pooled_ratio_sd(everyone) if left else (0.0, 0),
    )
    unsettled = [everyone[i] for i in f.unsettled]
    busy = busy_share(verdict_windows(measured), cpus)
    reasons = decision.shortfalls(f, "the recommendation was measured only")
    reasons += _busy_reasons(busy, search_busy or [])
    if unsettled:
        names = ", ".join(f"trial {c.trial.number}" for c in unsettled)
        most = max(f.unsettled.values())
        reasons.append(
            (
                Confidence.MEDIUM,
                f"{names} may still be faster by more than {MARGIN:.1%} (up to {most:.0%})",
            )
        )
    return decision.assurance(
        reasons,
        _clear(rec, cands, f.pairing, busy),
        unsettled,
        _settle(unsettled, busy, repeats, f.scattered),
        busy >= BUSY_MEDIUM,
        f.scattered,
    )


def _busy_reasons(busy: float, search_busy: list[float]) -> list[Shortfall]:
    """Other work on the machine, during the verdict's rounds and during the search."""
    reasons: list[Shortfall] = []
    if busy >= BUSY_MEDIUM:
        level = Confidence.LOW if busy >= BUSY_LOW else Confidence.MEDIUM
        reasons.append(
            (level, f"other processes took {busy:.0%} of the CPUs while it was measured")
        )
    disturbed = sum(share >= BUSY_MEDIUM for share in search_busy)
    if disturbed:
        reasons.append(
            (
                Confidence.MEDIUM,
                f"{disturbed} of {len(search_busy)} search trials ran while other work "
                f"took {BUSY_MEDIUM:.0%} or more of the CPUs, so a setting they timed slow may "
                "not have reached the verdict",
            )
        )
    return reasons


def _clear(rec: Recommendation, cands: list[Candidate], pairing: float, busy: float) -> str:
    """Why ``high``: the figures that cleared each risk. Settings that left the race are
    counted as such: they were ruled out round by round, not by the final interval."""
    others = len(_candidates.in_race(cands)) - 1
    left = sum(c.left_after is not None for c in cands)
    faster = (
        "It is the fastest setting measured"
        if rec.is_fastest
        else f"It is within {rec.noise:.1%} of the fastest"
    )
    parts = [faster]
    if others:
        who = (
            f"none of the {others} other settings still in the race can"
            if others > 1
            else "the other setting still in the race cannot"
        )
        parts.append(
            f"{who} be more than {MARGIN:.1%} faster (95% interval); "
            f"round-by-round ratios agree within {pairing:.0%}"
        )
    if left:
        who = "they" if left != 1 else "it"
        parts.append(
            f"{left} setting{'s' * (left != 1)} left the race, {_candidates.LEFT_RACE} {who} ran"
        )
    return "; ".join([*parts, f"other processes took {busy:.0%} of the CPUs"]) + "."


def _settle(unsettled: list[Candidate], busy: float, repeats: int, scattered: bool) -> str:
    """What would tell the open settings apart."""
    if busy >= BUSY_MEDIUM:
        return (
            "a quieter machine (run again when other work has stopped, or hydra.sweeper.busy=wait)"
        )
    if scattered:  # more rounds only widen a range; a longer window averages some of it
        return (
            "a quieter machine: its speed scattered between rounds by more than the label "
            "allows, and more rounds only widen that range (a larger trial.steps averages "
            "some of the scatter out of each round)"
        )
    if unsettled:
        return f"{repeats} more rounds: run again with hydra.sweeper.verdict_repeats={2 * repeats}"
    return "more repeats on a quieter machine"


def still_open(cands: list[Candidate], repeats: int, cpus: int) -> tuple[list[Candidate], str]:
    """The settings one more round could still tell apart, and when there are none, why.

    The fastest and the cheaper settings too close to call, and any setting that may beat
    the pick; not while other work is what blurs them: rounds on a busy machine buy nothing.
    Rounds whose own scatter holds the label at ``low`` go on: the label cannot rise, but
    the pick can still change, and more rounds make it right more often (docs/method.md).
    """
    close = unsure(cands)
    if not any(c.values for c in cands):
        return close, "nothing measured"
    rec = recommend(cands)
    assurance = assess(rec, cands, cpus, repeats)
    if assurance.busy:
        return [], "other work on the machine blurs the rounds"
    if not (close or assurance.unsettled):
        return close, "settled"
    wanted = [*close, rec.chosen, rec.fastest, *assurance.unsettled]
    return list({id(c): c for c in wanted}.values()), ""
