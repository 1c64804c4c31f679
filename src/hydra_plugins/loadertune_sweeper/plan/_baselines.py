"""The usual guesses, measured in every study so the verdict can compare them with the best.

- ``default``: ``num_workers=0``, PyTorch's default (loading in the training process).
- ``rule_of_thumb``: "CPU cores x 4", capped at the search space's upper bound; with several
  ranks on the node (``trial.nproc_per_node``), 4 x each rank's share of the CPUs.
- ``lightning``: with several ranks only, Lightning's ``suggested_max_num_workers``:
  ``max(1, CPUs // ranks - 1)`` per rank, one CPU left to each rank's training process.
- ``start_small`` / ``doubling``: "start at 2 and double while it helps": 2, then 4, 8 ...
  each rung enqueued only if the one before beat its predecessor; the last rung is the
  range's top (a range the guess widened to 38 ends 16, 32, 38), so geometric steps reach
  the top of a wide range in a few trials (:mod:`._refine` then narrows it down).

Baselines use PyTorch's ``prefetch_factor`` of 2 where the space allows it, so they stand for
the plain advice rather than for a tuned setting.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from loadertune.config import DEFAULT_PREFETCH_FACTOR, plain_key, workers_of
from loadertune.machine import cpus_per_rank

from .._keys import TrialAttr

IMPROVES = 0.02  # a rung must be this much faster than the one before to keep doubling


class Role(str, Enum):
    """Why a trial was measured, when it stands for a piece of advice."""

    DEFAULT = "default"
    START_SMALL = "start_small"
    DOUBLING = "doubling"
    RULE_OF_THUMB = "rule_of_thumb"
    MODEL_GUESS = "model_guess"
    LIGHTNING = "lightning"

    @property
    def label(self) -> str:
        """How the verdict names it."""
        return _LABELS[self]


_LABELS = {
    Role.DEFAULT: "default (0 workers)",
    Role.RULE_OF_THUMB: "rule of thumb (4 x CPUs, capped)",
    Role.LIGHTNING: "Lightning's suggestion (CPUs // ranks - 1)",
    Role.START_SMALL: "start at 2",
    Role.DOUBLING: "doubling path",
    Role.MODEL_GUESS: "model-based guess",
}


def role_of(trial: FrozenTrial) -> Role | None:
    """The advice a trial stands for, if any."""
    try:
        return Role(trial.user_attrs.get(TrialAttr.BASELINE))
    except ValueError:
        return None


def key_of(space: dict[str, BaseDistribution], name: str) -> str | None:
    """The key of ``space`` that sets config key ``name`` (``+`` or not)."""
    return next((k for k in space if plain_key(k) == name), None)


def allowed(dist: BaseDistribution, value: int) -> bool:
    """Whether ``value`` is a point of ``dist``."""
    if isinstance(dist, IntDistribution):
        return dist.low <= value <= dist.high and (value - dist.low) % dist.step == 0
    if isinstance(dist, CategoricalDistribution):
        return value in dist.choices
    return False


def upper(dist: BaseDistribution) -> int:
    """The largest number of workers ``dist`` allows."""
    if isinstance(dist, IntDistribution):
        return dist.high
    if isinstance(dist, CategoricalDistribution):
        return max(int(str(c)) for c in dist.choices)
    raise TypeError(f"not a workers distribution: {dist!r}")


def nearest(dist: BaseDistribution, workers: int) -> int:
    """The point of ``dist`` closest to ``workers`` (the smaller one on a tie)."""
    if isinstance(dist, IntDistribution):
        below = dist.low + (max(workers - dist.low, 0) // dist.step) * dist.step
        points = [p for p in (below, below + dist.step) if p <= dist.high] or [dist.high]
    else:
        points = [int(str(c)) for c in getattr(dist, "choices", ())]
    return min(points, key=lambda p: (abs(p - workers), p)) if points else workers


def params_for(space: dict[str, BaseDistribution], workers: int) -> dict[str, Any] | None:
    wkey = key_of(space, "loader.num_workers")
    if wkey is None or not allowed(space[wkey], workers):
        return None
    params: dict[str, Any] = {wkey: workers}
    pkey = key_of(space, "loader.prefetch_factor")
    if pkey is not None and workers > 0 and allowed(space[pkey], DEFAULT_PREFETCH_FACTOR):
        params[pkey] = DEFAULT_PREFETCH_FACTOR
    return params


def lightning_workers(usable_cpus: int, nproc_per_node: int) -> int:
    """Lightning's ``suggested_max_num_workers(local_world_size)``: ``max(1, cpus // ranks -
    1)`` workers per rank."""
    return max(1, usable_cpus // max(nproc_per_node, 1) - 1)


def initial(
    space: dict[str, BaseDistribution], usable_cpus: int, nproc_per_node: int = 1
) -> list[tuple[dict[str, Any], Role]]:
    """(params, label) of the baselines a new study starts with, in order.

    ``usable_cpus`` are the node's; each of ``nproc_per_node`` ranks gets its share.
    """
    wkey = key_of(space, "loader.num_workers")
    if wkey is None:
        return []
    high = upper(space[wkey])
    per_rank = cpus_per_rank(nproc_per_node, usable_cpus)
    advice = [
        (0, Role.DEFAULT),
        (min(2, high), Role.START_SMALL),
        (min(4 * per_rank, high), Role.RULE_OF_THUMB),
    ]
    if nproc_per_node > 1:
        advice.append((min(lightning_workers(usable_cpus, nproc_per_node), high), Role.LIGHTNING))
    out: list[tuple[dict[str, Any], Role]] = []
    for workers, label in advice:
        params = params_for(space, workers)
        if params is not None and all(p != params for p, _ in out):
            out.append((params, label))
    return out


def enqueue_initial(
    study: optuna.Study, space: dict[str, BaseDistribution], cpus: int, nproc_per_node: int = 1
) -> None:
    """Enqueue the baselines at the front of a new study."""
    for params, label in initial(space, cpus, nproc_per_node):
        study.enqueue_trial(
            params, user_attrs={TrialAttr.BASELINE: label.value}, skip_if_exists=True
        )


def enqueue_missing(
    study: optuna.Study, space: dict[str, BaseDistribution], cpus: int, nproc_per_node: int = 1
) -> list[Role]:
    """Queue again the baselines a resumed study lacks; the roles queued.

    A baseline is missing when no trial of its role completed and none waits: the sweep that
    queued it was interrupted first, or it failed on a dataset bug since fixed. Without them
    the verdict has no default to compare with and no guess. A setting already measured is
    answered from that measurement, so this costs nothing then.
    """
    alive = (TrialState.COMPLETE, TrialState.WAITING, TrialState.RUNNING)
    present = {role_of(t) for t in study.get_trials(deepcopy=False, states=alive)}
    queued = []
    for params, role in initial(space, cpus, nproc_per_node):
        if role not in present:
            study.enqueue_trial(params, user_attrs={TrialAttr.BASELINE: role.value})
            queued.append(role)
    return queued


def next_rung(
    study: optuna.Study, finished: FrozenTrial, space: dict[str, BaseDistribution]
) -> dict[str, Any] | None:
    """After a rung of "start at 2, double while it helps", the next rung's params, or None."""
    role = role_of(finished)
    if role not in (Role.START_SMALL, Role.DOUBLING):
        return None
    if finished.state != TrialState.COMPLETE or finished.value is None:
        return None
    wkey = key_of(space, "loader.num_workers")
    if wkey is None:
        return None
    workers = workers_of(finished.params, 0) or 0
    path = rungs(upper(space[wkey]))
    if role == Role.DOUBLING:
        below = [w for w in path if w < workers]
        before = _value_at(study, wkey, below[-1] if below else workers // 2)
        if before is None or not helped(finished.value, before):
            return None
    above = [w for w in path if w > workers]
    return params_for(space, above[0]) if workers > 0 and above else None


def doubling_stop(trials: list[FrozenTrial]) -> int | None:
    """The workers "start at 2 and double while it helps" ends at, the doubling path's own
    answer: its last rung that beat the rung before it by ``IMPROVES`` (the start, if none
    did); None when no rung completed. The rungs below it are the path's way there, not
    advice, and the verdict does not measure them again for it."""
    at: dict[int, float] = {}
    for t in trials:
        if t.state != TrialState.COMPLETE or t.value is None:
            continue
        if role_of(t) in (Role.START_SMALL, Role.DOUBLING):
            workers = workers_of(t.params, 0) or 0
            at[workers] = min(at.get(workers, t.value), t.value)
    if not at:
        return None
    path = sorted(at)
    stop = path[0]
    for workers in path[1:]:
        if not helped(at[workers], at[stop]):
            break
        stop = workers
    return stop


def helped(value: float, before: float) -> bool:
    """Whether a rung's time per sample ``value`` beat the rung before it (``before``) by
    ``IMPROVES``: the doubling path goes on, and ends at the last rung that did."""
    return value <= before * (1 - IMPROVES)


def rungs(high: int) -> list[int]:
    """The doubling path's rungs in a range up to ``high``: 2, 4, 8 ... and ``high`` itself."""
    path = [min(2, high)]
    while 0 < path[-1] < high:
        path.append(min(2 * path[-1], high))
    return path


def _value_at(study: optuna.Study, wkey: str, workers: int) -> float | None:
    values = [
        t.value
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.params.get(wkey) == workers and t.value is not None
    ]
    return min(values) if values else None
