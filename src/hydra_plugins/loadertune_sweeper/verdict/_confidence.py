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

import statistics
from dataclasses import dataclass
from typing import TypeAlias

from loadertune import decision
from loadertune.decision import Confidence, Shortfall
from loadertune.machine import QUIET_SHARE, other_share
from loadertune.measure import MARGIN, TOLERANCE
from loadertune.measure import _paired_stats as paired_stats

from . import _candidates
from ._candidates import Candidate, Recommendation, recommend, rounds_of

Assurance: TypeAlias = decision.Assurance[Candidate]  # the core's, naming candidates as open

FASTER_BY = 0.05  # a pick more than this much slower than another setting is a wrong pick
BUSY_MEDIUM = QUIET_SHARE  # share of the usable CPUs other work took above which: medium
BUSY_LOW = 0.35  # ... and low
# Why a setting that lost its rounds left the race (older verdicts name no reason).
LOST = ("", _candidates.LEFT_RACE, _candidates.LEFT_FAR)


def busy_share(windows: list[tuple[float, float]], cpus: int) -> float:
    """Median share of the usable CPUs' capacity that other work and steal took (0..1), over
    windows given as (other CPU %, steal %) of one core."""
    if not windows:
        return 0.0
    return statistics.median(other_share(o, s, cpus) for o, s in windows)


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
    """The sd of one log time ratio all candidates' rounds show together, and its degrees of
    freedom (:func:`loadertune.measure._paired_stats.pooled_log_sd`)."""
    return paired_stats.pooled_log_sd(rounds_of([c for c in cands if c.values]))


def assess(
    rec: Recommendation,
    cands: list[Candidate],
    cpus: int,
    repeats: int,
    search_busy: list[float] | None = None,
) -> Assurance:
    """The confidence in ``rec`` (:mod:`loadertune.decision`), with the sweep's own checks:
    the noise pooled over every setting measured again, and other work on the machine.
    ``search_busy``: each search trial's busy share (0..1). A setting that lost every round
    (:func:`_compared_and_lost`) is checked only for whether it may still be faster, over the
    rounds it ran, with the noise every candidate's rounds show
    (:func:`loadertune.decision.findings`)."""
    measured, left = _compared_and_lost(cands)
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
    reasons += _failed_reasons(rec, cands)
    if unsettled:
        names = ", ".join(f"trial {c.trial.number}" for c in unsettled)
        most = max(f.unsettled.values())
        reasons.append(
            (
                Confidence.MEDIUM,
                f"{names} may still be faster by more than {MARGIN:.1%} ({decision.up_to(most)})",
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


def _compared_and_lost(cands: list[Candidate]) -> tuple[list[Candidate], list[Candidate]]:
    """The measured candidates compared with the pick, and those that left the race by losing
    every round (:data:`LOST`; older verdicts name no reason): no risk to
    the pick, with fewer rounds. One that left because more rounds could not change the pick
    is compared: it left close to it."""
    lost = [c for c in cands if c.values and c.left_after is not None and c.left_why in LOST]
    return [c for c in cands if c.values and c not in lost and not c.failed], lost


def _failed_reasons(rec: Recommendation, cands: list[Candidate]) -> list[Shortfall]:
    """A setting that failed a round is never the pick; the pick is ``medium`` at best when
    that setting was not clearly slower: over the rounds it ran, or, failing every one, in
    the search. One that lost by more than the tolerance took nothing from the pick."""
    reasons: list[Shortfall] = []
    for c in (c for c in cands if c.failed):
        shared = set(c.by_round) & set(rec.chosen.by_round)
        if shared:
            ratio = _candidates.compare(c, rec.chosen)[0]
            n = len(shared)
            seen = f"{ratio - 1:+.1%} against the pick over the {n} round{'s' * (n != 1)} it ran"
        else:
            ratio = float(c.trial.value or 0.0) / rec.chosen.median
            seen = f"{ratio - 1:+.1%} against the pick in the search"
        if ratio < 1 + TOLERANCE:
            reasons.append(
                (
                    Confidence.MEDIUM,
                    f"trial {c.trial.number} (num_workers={c.workers}), {seen}, "
                    f"{c.failed_why} and cannot be recommended",
                )
            )
    return reasons


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
    compared, lost = _compared_and_lost(cands)
    others, left = len(compared) - 1, len(lost)
    faster = (
        "It is the fastest setting measured"
        if rec.is_fastest
        else f"It is shown at most {rec.may_cost:.1%} slower than the fastest"
    )
    parts = [faster]
    if others:
        who = (
            f"none of the {others} other settings compared with it can"
            if others > 1
            else "the other setting compared with it cannot"
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


@dataclass(frozen=True)
class NextRound:
    """What the next verdict round measures, who leaves the race first, and, when no round
    is worth running, why the rounds stop."""

    measure: list[Candidate]
    leave: list[tuple[Candidate, str]]
    why: str = ""


def next_round(
    cands: list[Candidate], least: int, most: int, cpus: int, min_gain: float = decision.MIN_GAIN
) -> NextRound:
    """The settings another round is worth (:func:`loadertune.decision.worth_a_round`: a
    rival that may beat the pick by more than the tolerance while its round is expected to
    win back ``min_gain`` of throughput, a cheaper setting that may yet be shown as fast while
    ``most`` rounds in all can show it), and those whose
    rounds could still lift the label (:func:`_label_rounds`). The others leave together,
    each with why. Nothing is worth a round while other work blurs them."""
    measured = _candidates.in_race(cands)
    rec = recommend(cands)
    if assess(rec, cands, cpus, least).busy:
        return NextRound([], [], "other work on the machine blurs the rounds")
    workers, memory = _candidates.costs_of(measured)
    noise = _candidates.everyones_noise(cands)
    outlook = decision.worth_a_round(rounds_of(measured), workers, most, memory, noise, min_gain)
    label = _label_rounds(rec, cands, least, most)
    which = [measured[i] for i in outlook.open] + label
    leave = [(measured[i], why) for i, why in outlook.done.items() if measured[i] not in label]
    if which:
        return NextRound(list({id(c): c for c in which}.values()), leave)
    stuck = any(why == decision.STUCK for why in outlook.done.values())
    return NextRound([], leave, "too close to call in the rounds allowed" if stuck else "settled")


def _label_rounds(
    rec: Recommendation, cands: list[Candidate], least: int, most: int
) -> list[Candidate]:
    """The pick and the settings that keep its label from ``high``, when their rounds can
    still lift it within ``most`` rounds: no scatter past ``medium``'s lines (a range only
    widens), every setting that may beat it by more than ``MARGIN`` still in the race and
    able to show it does not, or only too few rounds of the pick. [] when it cannot rise."""
    compared, _ = _compared_and_lost(cands)
    at = {id(c): i for i, c in enumerate(compared)}
    pooled, _ = pooled_ratio_sd(compared)
    times = rounds_of(compared)
    f = decision.findings(times, at[id(rec.chosen)], at[id(rec.fastest)], pooled)
    if f.pairing > paired_stats.RATIO_MEDIUM or f.drift > paired_stats.SPREAD_MEDIUM:
        return []
    need = [compared[k] for k in f.unsettled]
    pick = rec.chosen.by_round
    for c in need:
        if (
            c.left_after is not None
            or paired_stats.rounds_to_settle(
                pick, c.by_round, most, pooled, 0, MARGIN, paired_stats.T95
            )
            is None
        ):
            return []
    if not need and f.repeats >= least:
        return []
    return [rec.chosen, *need]
