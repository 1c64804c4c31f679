"""The verdict's statistics: which settings to measure again, and the cheapest one shown to
be as fast as the fastest.

Trials in a study are measured once each, at different moments of a shared machine's life.
Before recommending, the top few settings and the baselines are measured again, interleaved
(A B C A B C ...) so drift hits them alike. Two settings are then compared round by round:
the ratio of their times in each round cancels what the machine was doing in that round, so
a steady 5% gap stands out even while the machine's own speed wanders by 30%.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from optuna.trial import FrozenTrial, TrialState

from loadertune import decision
from loadertune.config import workers_of
from loadertune.measure import TOLERANCE
from loadertune.measure import _paired_stats as paired_stats

from .._keys import TrialAttr
from ..plan._baselines import Role, doubling_stop, role_of


@dataclass
class Candidate:
    """A setting measured again for the verdict."""

    trial: FrozenTrial
    roles: list[Role]  # the advice it stands for
    rank: int | None = None  # its place among the study's fastest, if among the top
    values: list[float] = field(default_factory=list)  # time per sample (ms) of each repeat
    memory_mb: list[float] = field(default_factory=list)
    cpu_percent: list[float] = field(default_factory=list)
    samples_per_s: list[float] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)  # the round of each value (default: 0, 1..)
    # CPU that other work took during each repeat's window, and steal, in % of one core.
    other_cpu_percent: list[float] = field(default_factory=list)
    steal_percent: list[float] = field(default_factory=list)
    first_batch_s: list[float] = field(default_factory=list)  # worker start-up, each repeat
    wait_p99_ms: list[float] = field(default_factory=list)  # the tail of the wait, each repeat
    long_waits: list[float] = field(default_factory=list)  # steps per 1000 that stalled
    bottleneck: str = ""
    why: str = ""
    left_after: int | None = None  # rounds after which it left the race
    left_why: str = ""  # why it left: LEFT_RACE, failed_why, or what more rounds could not buy
    failed: list[tuple[int, str]] = field(default_factory=list)  # (round, why) it measured nothing

    @property
    def failed_why(self) -> str:
        """Why it left the race when a round of it failed: the first failure, its round."""
        round_, why = self.failed[0]
        return f"failed in round {round_} ({why})"

    @property
    def workers(self) -> int:
        return workers_of(self.trial.params, 0) or 0

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("inf")

    @property
    def spread(self) -> float:
        """Relative range of the repeats: (max - min) / median."""
        return paired_stats.spread(self.values)

    @property
    def by_round(self) -> dict[int, float]:
        """Its time per sample in each verdict round (rounds 0, 1, .. when none are given)."""
        return dict(zip(self.rounds or range(len(self.values)), self.values, strict=True))

    @property
    def labels(self) -> list[str]:
        """Display names: the advice it stands for, then its rank."""
        top = [f"top {self.rank}"] if self.rank is not None else []
        return [r.label for r in self.roles] + top

    @property
    def name(self) -> str:
        return ", ".join(self.labels)


def candidates(trials: list[FrozenTrial], top: int) -> list[Candidate]:
    """The ``top`` fastest distinct settings plus every baseline that completed (of the
    doubling path, the rung it ends at: :func:`..plan._baselines.doubling_stop`)."""
    complete = [
        t
        for t in trials
        if t.state == TrialState.COMPLETE
        and t.value is not None
        and t.user_attrs.get(TrialAttr.REPEAT_OF) is None
    ]
    chosen: dict[int, Candidate] = {}
    by_number = {t.number: t for t in complete}
    stop = doubling_stop(trials)
    for t in trials:  # a baseline answered from an earlier trial stands on that trial
        role = role_of(t) if t.state == TrialState.COMPLETE else None
        measured = by_number.get(int(t.user_attrs.get(TrialAttr.REPEAT_OF, t.number)))
        if role == Role.DOUBLING and workers_of(t.params, 0) != stop:
            continue
        if role is not None and measured is not None:
            roles = chosen.setdefault(measured.number, Candidate(measured, [])).roles
            if role not in roles:
                roles.append(role)
    for rank, t in enumerate(sorted(complete, key=lambda t: float(t.value or 0.0))[:top], start=1):
        chosen.setdefault(t.number, Candidate(t, [])).rank = rank
    return sorted(chosen.values(), key=lambda c: c.trial.number)


def with_role(cands: list[Candidate], role: Role) -> Candidate | None:
    """The measured candidate that stands for ``role``, if any."""
    return next((c for c in cands if role in c.roles and c.values), None)


@dataclass
class Recommendation:
    """The cheapest setting shown as fast as the fastest, and how it compares."""

    chosen: Candidate
    fastest: Candidate
    may_cost: float  # how much slower than the fastest the pick may be (0 for the fastest)
    speedups: dict[Role, tuple[float, float, float]]  # advice -> (median, low, high) ratios
    noise: float = 0.0  # the noise measured, with no floor (see :func:`measured_noise`)
    # Cheaper than the pick, not shown as fast: what each might cost (decision.Unshown).
    unshown: list[tuple[Candidate, decision.Unshown]] = field(default_factory=list)
    # The workers the search's ceiling found enough, when the pick is held to them
    # (:func:`within_ceiling`): the fastest measured has more and was not shown faster.
    ceiling: int | None = None

    @property
    def is_fastest(self) -> bool:
        return self.chosen is self.fastest


def compare(a: Candidate, b: Candidate) -> tuple[float, float, float]:
    """(median, low, high) of ``a``'s time over ``b``'s
    (:func:`loadertune.measure._paired_stats.compare`)."""
    return paired_stats.compare(a.by_round, b.by_round)


def memory(c: Candidate) -> float:
    """Its median peak memory (MB), the cost that breaks a tie in workers."""
    return statistics.median(c.memory_mb or [0.0])


def rounds_of(measured: list[Candidate]) -> dict[int, paired_stats.Rounds]:
    """The candidates' times by round, keyed by their place in ``measured``: the plain input
    of :mod:`loadertune.decision`."""
    return {i: c.by_round for i, c in enumerate(measured)}


def costs_of(measured: list[Candidate]) -> tuple[dict[int, int], dict[int, float]]:
    """The candidates' costs (workers) and memory, keyed as :func:`rounds_of`."""
    return {i: c.workers for i, c in enumerate(measured)}, {
        i: memory(c) for i, c in enumerate(measured)
    }


def everyones_noise(cands: list[Candidate]) -> tuple[float, int]:
    """The log-ratio sd all measured candidates' rounds show together, those that left the
    race included, and its degrees of freedom
    (:func:`loadertune.measure._paired_stats.pooled_log_sd`)."""
    return paired_stats.pooled_log_sd(rounds_of([c for c in cands if c.values]))


def in_race(cands: list[Candidate]) -> list[Candidate]:
    """The measured candidates that did not leave the race: the ones the pick is made from
    and judged against (a setting that left has fewer rounds, and its median, over other
    rounds, does not compare; one that failed a round left it, and is never the pick)."""
    return [c for c in cands if c.values and c.left_after is None]


def recommend(cands: list[Candidate], enough: int | None = None) -> Recommendation:
    """Cheapest (fewest workers, then less memory by ``decision.MEMORY_MARGIN``, else the
    faster) shown as fast as the fastest (:func:`loadertune.decision.recommend`) among those
    in the race, with the speed-up of each advice over it (over the rounds they share, for a
    setting that left the race too). ``enough``: the workers at which the search stopped at
    a ceiling (``plan._ceiling.enough_workers``); a pick with more is held to them where
    :func:`within_ceiling` finds one."""
    measured = in_race(cands)
    workers, memory = costs_of(measured)
    everyone = everyones_noise(cands)
    choice = decision.recommend(rounds_of(measured), workers, memory, everyone)
    chosen, fastest = measured[choice.chosen], measured[choice.fastest]
    may_cost, ceiling = choice.may_cost, None
    if enough is not None and chosen.workers > enough:
        held = within_ceiling(cands, fastest, enough, everyone)
        if held is not None:
            chosen, ceiling = held, enough
            may_cost = max(
                paired_stats.may_be_faster(held.by_round, fastest.by_round, *everyone), 0.0
            )
    speedups = {}
    for c in (c for c in cands if c.values):
        for role in c.roles:
            mid, low, high = compare(c, chosen)
            speedups[role] = (mid, low, high)
    unshown = [
        (measured[i], u) for i, u in choice.unshown.items() if measured[i].workers < chosen.workers
    ]
    noise = measured_noise(chosen, fastest)
    return Recommendation(chosen, fastest, may_cost, speedups, noise, unshown, ceiling)


def within_ceiling(
    cands: list[Candidate], best: Candidate, enough: int, noise: tuple[float, int]
) -> Candidate | None:
    """The fastest setting of at most ``enough`` workers the rounds cannot tell from ``best``
    (the fastest measured, with more): its round-by-round time within ``TOLERANCE`` of
    ``best``'s at the median, over two shared rounds at least, and not shown slower
    (:func:`loadertune.measure._paired_stats.shown_slower`, at ``noise``: everyone's); None
    if none.

    The search stopped at a ceiling that found ``enough`` workers enough: the loader was
    hidden there, or the CPUs were full, and more workers were no faster; or the tail was
    ridden out, and more workers bought under the search's 5%. More workers then buy little
    or no speed, only memory and CPU taken from the step, so where the rounds cannot show
    the extra workers faster, the settings within the ceiling's count are the pick. On a
    busy 2-core machine a CPU-bound loader's rounds scatter by 10-40%, a stalled store's by
    up to 15%, and the fastest median among settings it cannot tell apart is a coin's throw
    (docs/method.md)."""
    near = []
    for c in cands:
        if not c.values or c.failed or c.workers > enough:
            continue
        ratios = paired_stats.paired(c.by_round, best.by_round)
        if len(ratios) < 2 or statistics.median(ratios) > 1 + TOLERANCE:
            continue
        if not paired_stats.shown_slower(c.by_round, best.by_round, *noise):
            near.append((statistics.median(ratios), c.workers, c))
    return min(near, key=lambda r: r[:2])[2] if near else None


def measured_noise(chosen: Candidate, fastest: Candidate) -> float:
    """The noise the repeats showed, never a floor: the relative range of the repeats when
    the pick is the fastest, else :func:`loadertune.measure._paired_stats.measured_noise`."""
    if chosen is fastest:
        return chosen.spread
    return paired_stats.measured_noise(chosen.by_round, fastest.by_round)


# Why a setting left the race, in the words every message about it uses.
LEFT_RACE = f"slower than the fastest by more than {TOLERANCE:.0%} in every round"


def out_of_race(cands: list[Candidate]) -> list[Candidate]:
    """The measured candidates that lost every round to the fastest by more than TOLERANCE
    (:func:`loadertune.decision.out_of_race`): more rounds of them are unlikely to change
    the pick."""
    measured = [c for c in cands if c.values]
    return [measured[i] for i in decision.out_of_race(rounds_of(measured))]


# A setting this much slower than the fastest in its search trial and in its first round
# leaves after that round (:func:`far_behind`).
FAR_BEHIND = 0.5
LEFT_FAR = (
    f"slower than the fastest by more than {FAR_BEHIND:.0%} in the search and in its first round"
)


def far_behind(cands: list[Candidate]) -> list[Candidate]:
    """The measured candidates one round has already shown far behind: more than
    ``FAR_BEHIND`` slower than the fastest in the round they shared and in their search
    trials too.

    Two looks that far apart, a round's paired ratio and a trial timed apart from it in the
    search, lie past any scatter the verdict's rounds have shown (round-by-round ratios
    spread up to about 30% on a busy 2-core machine), so a second round cannot bring such a
    setting within ``TOLERANCE``. They are the verdict's slowest measurements (a 0-worker
    default takes several times the pick's seconds a round); the speed-up over them stands on
    the one round and their search trial."""
    measured = [c for c in cands if c.values]
    if len(measured) < 2:
        return []
    best = measured[decision.fastest(rounds_of(measured))]
    far = 1 + FAR_BEHIND
    out = []
    for c in measured:
        ratios = paired_stats.paired(c.by_round, best.by_round)
        searched = float(c.trial.value or 0.0) / float(best.trial.value or float("inf"))
        if c is not best and len(ratios) == 1 and ratios[0] > far and searched > far:
            out.append(c)
    return out
