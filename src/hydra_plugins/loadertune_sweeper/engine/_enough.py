"""When a search has nothing left worth measuring, short of its trial budget.

The space is covered, the sampler keeps proposing settings already answered, or no loader
setting left can beat the fastest measured (:mod:`..plan._ceiling`: the loader is hidden,
loading fills the CPUs, or the tail is ridden out). The last is kept with the study, so the
verdict can say in one line why the search stopped, and hold its pick to the workers the
ceiling found enough; ``hydra.sweeper.stop_at_ceiling=false`` measures on to the budget.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loadertune.machine import usable_cpus

from .._keys import StudyAttr
from .._optuna_private import is_exhaustive
from ..plan import _ceiling, _enumerate

if TYPE_CHECKING:
    import optuna

    from ..config import SweepSettings
    from ..plan._sweep_plan import SweepPlan

REPEATS_IN_A_ROW = 100  # proposals of measured settings in a row that end a search


def nothing_left(
    study: optuna.Study, plan: SweepPlan, s: SweepSettings, sampler: Any, in_a_row: int
) -> str | None:
    """Why the search can stop now (the note to show), or None to go on. A user's own
    suggestions and an exhaustive sampler (grid, brute force) are never cut at a ceiling:
    they asked for every point."""
    custom = s.custom_search_space
    if not custom and _enumerate.covered(study, plan):
        if hasattr(sampler, "is_exhausted"):
            return "the grid is covered: every point has been measured"
        return "every setting of the search space has an answer"
    if in_a_row >= REPEATS_IN_A_ROW:
        return (
            f"stopping: the sampler proposed {in_a_row} settings in a row that were "
            "measured already; the search space looks covered"
        )
    if custom or not s.stop_at_ceiling or is_exhaustive(study.sampler):
        return None
    stop = _ceiling.ceiling(study, plan, usable_cpus())
    if stop is None:
        return None
    study.set_user_attr(StudyAttr.ENOUGH_WORKERS, stop.enough)
    study.set_user_attr(StudyAttr.SEARCH_STOPPED, stop.why)
    return f"stopping the search: {stop.why}"


def forget_stop(study: optuna.Study) -> None:
    """Clear a ceiling stop an earlier invocation of the study left: this one searches on
    (and says so again only if it stops at one)."""
    if _ceiling.stopped_why(study):
        study.set_user_attr(StudyAttr.SEARCH_STOPPED, "")
