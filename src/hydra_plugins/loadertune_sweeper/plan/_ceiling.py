"""When the search may stop early: no loader setting left can beat the fastest measured.

Three ceilings end a default search before its trial budget, the first two read from the
figures the fastest setting's own trial recorded (``_keys.TrialFigures``):

- **The loader is hidden**: the step waited for data no more than :data:`HIDDEN_WAIT` of
  its window. Removing the rest of the wait is the most any loader setting can buy, and that
  is within the verdict's tolerance, so more workers or deeper prefetch need not be measured.
- **The CPUs are full**: the trial's processes keep :data:`CPU_FULL` of the usable CPUs busy
  while the step still waits. More workers or deeper prefetch cannot add CPU; what would help is
  cheaper decoding, caching or uint8 batches (the verdict's "what limits it" line). When
  0 workers (loading in the training process) is the fastest, the figures are one worker's:
  it kept the CPUs full and was slower, so a worker only takes CPU from the step.
- **The tail is ridden out** (a range the guess widened for I/O, :mod:`._refine`): more
  workers were no faster, the fewest workers within ``_refine.SUFFICIENT`` of the fastest
  are known within a quarter, and doubling the prefetch depth at that count stopped buying
  more than that. The step may still wait on a rare stalled read, so neither figure above
  holds, but the settings left trade the same batches in flight (workers x depth) and are
  unlikely to beat the fastest by more than ``SUFFICIENT``; the verdict settles the near ones.

The first two count only once the neighbours of the fastest count ``w`` were measured: ``w - 1``
(completed or pruned: on a shared CPU fewer workers leave more of it to the step, and the
verdict, which measures the fastest settings again, is where a near tie between the two is
settled) and a count above ``w`` (or ``w`` is the range's top: more workers added nothing);
nothing waits in the queue (the doubling path, the guess, the bisection); for the CPUs,
other work took under ``QUIET_SHARE`` of them in that trial (the verdict's line for a busy
machine: when the other work leaves, more workers may have more CPU to use; a wait that is
hidden stays hidden); and the space searched is
``num_workers`` and ``prefetch_factor`` only (a batch size or pinned memory can still change
the step). The verdict then measures the fastest settings again, as always, and says in one
line why the search stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from optuna.distributions import IntDistribution
from optuna.trial import TrialState

from loadertune.config import plain_key
from loadertune.machine import QUIET_SHARE, other_share
from loadertune.measure import TOLERANCE

from .._keys import StudyAttr, TrialAttr, TrialFigures
from . import _refine

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from ._sweep_plan import SweepPlan

HIDDEN_WAIT = TOLERANCE  # the step waited at most this share of its window: loading is hidden
CPU_FULL = 0.90  # loading kept this share of the usable CPUs busy: no setting adds CPU
SEARCHED = frozenset({"loader.num_workers", "loader.prefetch_factor"})


@dataclass(frozen=True)
class Stop:
    """A ceiling reached: why (a sentence), and the workers it found enough. For the hidden
    loader and the full CPUs, the fastest count, past which more workers were no faster (or
    it is the range's top) and cannot buy speed. For the ridden-out tail, the fewest count
    within ``_refine.SUFFICIENT`` of the fastest, its depth settled: the workers past it
    trade the same batches in flight for memory and CPU, and bought under that margin."""

    why: str
    enough: int


def reached(study: optuna.Study, plan: SweepPlan, cpus: int) -> str | None:
    """Why the search can stop now (a sentence), or None while a loader setting not yet
    measured may still be faster than the fastest measured (see the module docstring)."""
    stop = ceiling(study, plan, cpus)
    return stop.why if stop else None


def ceiling(study: optuna.Study, plan: SweepPlan, cpus: int) -> Stop | None:
    """The ceiling the search has reached (:func:`reached`), with the workers it found
    enough, or None."""
    wkey = plan.workers_key()
    dist = plan.space.get(wkey) if wkey else None
    if wkey is None or not isinstance(dist, IntDistribution):
        return None
    if any(plain_key(k) not in SEARCHED for k in plan.space):
        return None
    if study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING)):
        return None
    fastest = fastest_by_count(study, wkey)
    if not fastest:
        return None
    best = min(fastest.values(), key=lambda t: float(t.value or 0.0))
    w, figures = int(best.params[wkey]), TrialFigures.of(best.user_attrs)
    if figures is None:
        return None
    trials = study.get_trials(deepcopy=False)
    answered = {int(t.params[wkey]) for t in trials if _answered(t, wkey)}
    if not (w >= dist.high or max(answered) > w):
        return None
    if w == 0:
        why = _in_process(best, fastest.get(1), cpus)
        return Stop(why, 0) if why else None
    name = f"num_workers={w} (trial {best.number})"
    if w - 1 in answered and _hidden(figures):
        return Stop(
            f"{name} hides the loader: the step waited for data "
            f"{(figures.data_wait_fraction or 0.0):.1%} of its window, within the "
            f"{TOLERANCE:.0%} tolerance; more workers or deeper prefetch cannot make the step "
            "faster by more than that",
            w,
        )
    if w - 1 in answered and _full(figures, cpus) and _other_share(figures, cpus) < QUIET_SHARE:
        return Stop(
            f"{name} keeps {(figures.cpu_percent_mean or 0.0) / (100.0 * cpus):.0%} of the "
            f"{cpus} usable CPUs busy while the step waits for data, and more workers were no "
            "faster; more workers or deeper prefetch cannot add CPU",
            w,
        )
    return _ridden_out(study, plan, name, w < max(answered))


def _in_process(best: FrozenTrial, one: FrozenTrial | None, cpus: int) -> str | None:
    """The CPU ceiling when loading in the training process (``best``, 0 workers) is the
    fastest: one worker (``one``) kept the CPUs full and was slower, so a worker only moved
    loading off the step onto the same CPUs; None otherwise."""
    f = TrialFigures.of(one.user_attrs) if one is not None else None
    if one is None or f is None or not _full(f, cpus) or _other_share(f, cpus) >= QUIET_SHARE:
        return None
    return (
        f"num_workers=0 (trial {best.number}) is the fastest: one worker (trial {one.number}) "
        f"kept {(f.cpu_percent_mean or 0.0) / (100.0 * cpus):.0%} of the {cpus} usable CPUs "
        "busy and was slower, so a worker only moves loading onto the CPUs the step uses; "
        "more workers or deeper prefetch cannot add CPU"
    )


def _ridden_out(study: optuna.Study, plan: SweepPlan, name: str, below_top: bool) -> Stop | None:
    """The third ceiling (the tail is ridden out: see the module docstring), enough at the
    fewest sufficient count, or None while the depth there is not settled. ``below_top``:
    more workers than the fastest count were measured (else it is the range's top)."""
    settled = _refine.depth_settled(study, plan)
    if settled is None:
        return None
    edge, depth = settled
    near = f"{_refine.SUFFICIENT:.0%}"
    more = "more workers were no faster" if below_top else "it is the range's top"
    why = (
        f"{name} rides out the tail: {more}, {edge} "
        f"workers are the fewest within {near} of it, and doubling prefetch_factor there (up "
        f"to {depth}) stopped buying more than {near}; the settings left trade the same "
        f"batches in flight and are unlikely to beat it by more than {near}"
    )
    return Stop(why, edge)


def fastest_by_count(study: optuna.Study, wkey: str) -> dict[int, FrozenTrial]:
    """The fastest complete trial measured at each ``num_workers`` (repeats answered from an
    earlier trial left out: they carry no figures of their own)."""
    fastest: dict[int, FrozenTrial] = {}
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if wkey not in t.params or t.value is None or TrialAttr.REPEAT_OF in t.user_attrs:
            continue
        count = int(t.params[wkey])
        if count not in fastest or t.value < float(fastest[count].value or 0.0):
            fastest[count] = t
    return fastest


def stopped_why(study: optuna.Study) -> str | None:
    """The sentence a search that stopped at a ceiling left with its study, if any."""
    why = study.user_attrs.get(StudyAttr.SEARCH_STOPPED)
    return str(why) if why else None


def enough_workers(study: optuna.Study) -> int | None:
    """The workers the ceiling a search stopped at found enough (:class:`Stop`), if any: the
    verdict holds its pick to them unless its rounds show more workers faster."""
    enough = study.user_attrs.get(StudyAttr.ENOUGH_WORKERS)
    return int(enough) if stopped_why(study) and isinstance(enough, int) else None


def _answered(t: FrozenTrial, wkey: str) -> bool:
    """Measured at a count of workers: completed, or pruned as slower (not a repeat)."""
    done = t.state in (TrialState.COMPLETE, TrialState.PRUNED)
    return done and wkey in t.params and TrialAttr.REPEAT_OF not in t.user_attrs


def _hidden(f: TrialFigures) -> bool:
    return f.data_wait_fraction is not None and f.data_wait_fraction <= HIDDEN_WAIT


def _full(f: TrialFigures, cpus: int) -> bool:
    if f.cpu_percent_mean is None or f.data_wait_fraction is None:
        return False
    return f.cpu_percent_mean >= CPU_FULL * 100.0 * cpus


def _other_share(f: TrialFigures, cpus: int) -> float:
    return other_share(f.other_cpu_percent or 0.0, f.steal_percent or 0.0, cpus)
