"""How sure a pick is: ``high``, ``medium`` or ``low``, and the sentence that says why.

A pick is only as good as the rounds behind it. :func:`findings` reads from them what can
make it wrong: too few rounds, round-by-round ratios that scatter (noise pairing did not
cancel), a machine whose speed drifted, and settings that may still be faster than the pick
by more than ``MARGIN`` at the top of a 95% interval. :func:`shortfalls` turns the first three
into reasons; each caller adds its own (the sweep: other work on the machine; both: the open
settings, named their way) and :func:`assurance` makes the label and sentence: ``high`` with
no reason, ``low`` if any reason is low, else ``medium``. Each check can only lower the label.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Generic, TypeVar

from loadertune.measure import (
    MARGIN,
    RATIO_LOW,
    RATIO_MEDIUM,
    SPREAD_LOW,
    SPREAD_MEDIUM,
    Rounds,
    may_be_faster,
    paired,
    ratio_spread,
    spread,
)

K = TypeVar("K", bound=Hashable)  # what names a setting
T = TypeVar("T")  # what an assurance names as still open


class Confidence(str, Enum):
    """How sure a pick is; the value is what results files and MLflow tags hold."""

    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


Shortfall = tuple[Confidence, str]  # a shortfall: the label it allows at most, and why


@dataclass(frozen=True)
class Assurance(Generic[T]):
    """The confidence, why, and what would settle what is still open."""

    level: Confidence
    why: str
    unsettled: list[T] = field(default_factory=list)  # may be faster than the pick
    settle: str = ""  # what would tell them apart ("" when nothing is open)
    busy: bool = False  # other work on the machine is among the reasons
    scattered: bool = False  # the rounds' own scatter holds it at low (Findings.scattered)


@dataclass(frozen=True)
class Findings(Generic[K]):
    """What the rounds show about a pick, for the confidence rules."""

    repeats: int  # rounds the pick was measured in
    pairing: float  # widest relative range of round-by-round ratios to the pick
    drift: float  # relative range of the pick's or the fastest's repeats, the larger
    unsettled: dict[K, float]  # may be faster than the pick by more than MARGIN: by how much

    @property
    def scattered(self) -> bool:
        """The rounds' own scatter holds the label at ``low``: a range of round-by-round
        ratios or of repeats beyond its low line. A range only widens as rounds are added, so
        more rounds of the same settings on the same machine cannot lift the label."""
        return self.pairing > RATIO_LOW or self.drift > SPREAD_LOW


def findings(
    times: Mapping[K, Rounds],
    chosen: K,
    fastest: K,
    pooled_sd: float = 0.0,
    left: Mapping[K, Rounds] | None = None,
    left_noise: tuple[float, int] = (0.0, 0),
) -> Findings[K]:
    """The figures behind the confidence in ``chosen``; ``pooled_sd``: a log-ratio sd the
    caller measured over more settings (:func:`loadertune.measure._paired_stats.may_be_faster`).

    ``left``: settings that left the race (:func:`out_of_race`), each over the rounds it ran.
    They lost every round by more than ``NOISE_FLOOR``, often after two rounds, so they are
    hardly a threat to the pick but may still be to ``high``: two noisy rounds can send the
    true best away. Each is checked like a setting in the race, over the rounds it shared with
    the pick, with ``left_noise`` (sd, degrees of freedom) measured over every setting's
    shared rounds. Without this, a pick whose rivals all left the race had nothing left to
    be compared with and was ``high`` on the drift alone (25 of 9,000 simulated wrong picks
    on a machine like a 2-core VM: docs/verdict.md).
    """
    pick = times[chosen]
    others = {k: v for k, v in times.items() if v and k != chosen}
    faster = {k: may_be_faster(pick, v, pooled_sd) for k, v in others.items()}
    sd, df = left_noise
    for k, v in (left or {}).items():
        if v and len(paired(pick, v)) >= 2:
            faster[k] = may_be_faster(pick, v, sd, df)
    return Findings(
        repeats=len(pick),
        pairing=max((ratio_spread(pick, v) for v in others.values()), default=0.0),
        drift=max(spread(list(pick.values())), spread(list(times[fastest].values()))),
        unsettled={k: by for k, by in faster.items() if by > MARGIN},
    )


def up_to(most: float) -> str:
    """How much faster an unsettled setting may be, in words: a few rounds' interval can
    reach past doubling, which reads as no figure at all ("up to 176382%")."""
    return f"up to {most:.0%}" if most < 1 else "more than 100%: too few rounds to say"


def shortfalls(f: Findings[K], measured: str) -> list[Shortfall]:
    """The reasons in the rounds themselves; ``measured`` starts the too-few-rounds one
    (``"the choice was measured"``: "the choice was measured 2 time(s)")."""
    reasons: list[Shortfall] = []
    n = f.repeats
    if n < 3:
        reasons.append((Confidence.LOW if n < 2 else Confidence.MEDIUM, f"{measured} {n} time(s)"))
    if f.pairing > RATIO_MEDIUM:
        level = Confidence.LOW if f.pairing > RATIO_LOW else Confidence.MEDIUM
        reasons.append((level, f"round-by-round ratios to it spread {f.pairing:.0%}"))
    if f.drift > SPREAD_MEDIUM:
        level = Confidence.LOW if f.drift > SPREAD_LOW else Confidence.MEDIUM
        reasons.append((level, f"the machine's speed drifted: repeats spread {f.drift:.0%}"))
    return reasons


def assurance(
    reasons: Sequence[Shortfall],
    high: str,
    unsettled: Sequence[T] = (),
    settle: str = "",
    busy: bool = False,
    scattered: bool = False,
) -> Assurance[T]:
    """``high`` (saying ``high``) when nothing falls short; else the lowest level a reason
    allows, and the reasons as one sentence."""
    if not reasons:
        return Assurance(Confidence.HIGH, high)
    low = any(level == Confidence.LOW for level, _ in reasons)
    why = "; ".join(text for _, text in reasons) + "."
    return Assurance(
        Confidence.LOW if low else Confidence.MEDIUM,
        why[0].upper() + why[1:],
        list(unsettled),
        settle,
        busy,
        scattered,
    )
