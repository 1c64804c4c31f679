"""A small finite space, walked setting by setting in order of promise instead of sampled.

Once the model-based guess has set the ``num_workers`` range, the space of a default study
holds a handful of settings (9 on 2 CPUs: 0 workers, and 1 or 2 workers with 4 prefetch
factors). When no more of them are left than the trial budget, sampling buys nothing: a
sampler proposes settings already answered and leaves others out. Instead the study measures
each setting once, the guess first and then outward (the nearest number of workers first,
fewer before more, PyTorch's prefetch factor before the others), and ends when every setting
has an answer. The settings are plain value dicts, as :func:`._sweep_plan.suggest` returns.

A sampler that keeps proposing settings already answered (TPE does, once it believes it has
found the best) is steered the same way: after a few such proposals in a row, the unanswered
setting nearest the one it keeps asking for is measured next (:func:`nearest_unanswered`),
so the search spends its trials around the sampler's favourite instead of on repeats.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from loadertune.config import DEFAULT_PREFETCH_FACTOR, plain_key

from .. import _optuna_private
from .._keys import TrialAttr
from ..study._storage import LOST

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution

    from ._sweep_plan import SweepPlan

Setting = dict[str, Any]


def answered(trial: FrozenTrial) -> bool:
    """Whether a trial stands for its setting: measured, pruned (refused or infeasible too),
    or crashed; not lost with its sweep nor given back, which measured nothing."""
    if trial.state in (TrialState.COMPLETE, TrialState.PRUNED):
        return True
    reason = trial.user_attrs.get(TrialAttr.REASON)
    return trial.state == TrialState.FAIL and reason not in (*LOST, None)


def unanswered(study: optuna.Study, plan: SweepPlan, every: list[Setting]) -> list[Setting]:
    """The settings of ``every`` no trial of the study has answered, is measuring, or waits
    to measure."""
    taken = []
    for t in study.get_trials(deepcopy=False):
        if answered(t) or t.state == TrialState.RUNNING:
            taken.append(t.params)
        elif t.state == TrialState.WAITING:
            taken.append(_optuna_private.fixed_params(t))
    keys = list(plan.space)
    return [s for s in every if not any(_same(s, params, keys) for params in taken)]


def _same(setting: Setting, params: dict[str, Any], keys: Iterable[str]) -> bool:
    """A trial's params, on the space's ``keys``, are exactly this setting (a key the setting
    leaves out because it cannot act, such as ``prefetch_factor`` without workers, is absent
    from them too)."""
    return {k: params[k] for k in keys if k in params} == setting


def in_order_of_promise(every: list[Setting], plan: SweepPlan, center: int) -> list[Setting]:
    """``every`` from the most promising: the number of workers nearest ``center`` (the
    guess) first, fewer before more at the same distance, then each other setting nearest
    its default (PyTorch's prefetch factor, else the first value written)."""
    wkey = plan.workers_key()

    def rank(s: Setting) -> tuple[float, ...]:
        workers = int(s.get(wkey, plan.default_workers)) if wkey else plan.default_workers
        others = [_distance(plan.space[k], k, v) for k, v in s.items() if k != wkey]
        return (abs(workers - center), workers, sum(others), *others)

    return sorted(every, key=rank)


def nearest_unanswered(
    study: optuna.Study, plan: SweepPlan, favourite: dict[str, Any]
) -> Setting | None:
    """The unanswered setting of a finite space nearest ``favourite`` (a trial's params):
    the fewest steps along each dimension's values, the number of workers counted first;
    None when the space is not finite, fully answered, or a trial waits in the queue."""
    left = _left_to_queue(study, plan)
    if not left:
        return None
    wkey = plan.workers_key()

    def steps(s: Setting, key: str) -> float:
        points = _points(plan.space[key])
        here, there = s.get(key), favourite.get(key)
        if here in points and there in points:
            return float(abs(points.index(here) - points.index(there)))
        return 0.0 if here == there else 1.0

    def rank(s: Setting) -> tuple[float, float]:
        workers = steps(s, wkey) if wkey else 0.0
        return (workers + sum(steps(s, k) for k in plan.space if k != wkey), workers)

    return min(left, key=rank)


def _left_to_queue(study: optuna.Study, plan: SweepPlan) -> list[Setting]:
    """The unanswered settings of a finite space, when one may be queued: none while a trial
    waits in the queue (a baseline, the guess, an earlier pick) or the space is not finite."""
    if study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        return []
    every = plan.settings()
    return [] if every is None else unanswered(study, plan, every)


def _points(dist: BaseDistribution) -> list[Any]:
    if isinstance(dist, CategoricalDistribution):
        return list(dist.choices)
    if isinstance(dist, IntDistribution):
        return list(range(dist.low, dist.high + 1, dist.step))
    return []


def _distance(dist: BaseDistribution, key: str, value: Any) -> float:
    points = _points(dist)
    home = 0
    if plain_key(key) == "loader.prefetch_factor" and DEFAULT_PREFETCH_FACTOR in points:
        home = points.index(DEFAULT_PREFETCH_FACTOR)
    return abs(points.index(value) - home) if value in points else 0.0


def next_setting(
    study: optuna.Study, plan: SweepPlan, budget_left: int | None, center: int
) -> Setting | None:
    """The setting to measure next when the space is walked rather than sampled: None while
    another trial waits in the queue (a baseline, the guess), when the space is not finite,
    every setting has an answer, or more settings are left than ``budget_left`` trials."""
    left = _left_to_queue(study, plan)
    if not left or (budget_left is not None and len(left) > budget_left):
        return None
    return in_order_of_promise(left, plan, center)[0]


def covered(study: optuna.Study, plan: SweepPlan) -> bool:
    """Whether every setting of a finite space has an answer: from then on any proposal
    could only be answered from an earlier trial."""
    every = plan.settings()
    if every is None:
        return False
    done = [t.params for t in study.get_trials(deepcopy=False) if answered(t)]
    keys = list(plan.space)
    return all(any(_same(s, params, keys) for params in done) for s in every)
