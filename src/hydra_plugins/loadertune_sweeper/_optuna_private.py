"""The few places the sweeper goes past Optuna's public API, each in one function with why.

Optuna's heartbeats and stale-trial detection are built for ``optimize()``; an ask/tell sweep
that keeps its own heartbeats needs the storage and the trial's storage id, which ``Study``
and ``Trial`` do not expose publicly; a queued trial's settings and whether a value lies in
a distribution have no public accessor either. Everything else the sweeper does with Optuna
goes through its public API.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

_EXHAUSTIVE = (optuna.samplers.GridSampler, optuna.samplers.BruteForceSampler)


def is_exhaustive(sampler: Any) -> bool:
    """Whether the sampler measures every point of a finite space (grid, brute force)."""
    return isinstance(sampler, _EXHAUSTIVE)


def tell(
    study: optuna.Study, trial: optuna.Trial, value: float | None, state: TrialState
) -> FrozenTrial:
    """``study.tell``, and the trial as stored.

    A grid or brute-force sampler calls ``study.stop()`` from ``after_trial`` once the space
    is covered, and outside ``optimize()`` that raises ``RuntimeError`` *after* the trial is
    stored; the sweep sees the grid covered on its own (``is_exhausted``), so it goes on.
    """
    try:
        return study.tell(trial, value, state=state)
    except RuntimeError:
        if not is_exhaustive(study.sampler):
            raise
    return study.get_trials(deepcopy=False)[trial.number]


def storage(study: optuna.Study) -> Any:
    """The study's storage: heartbeats are recorded on it directly (``Study._storage``)."""
    return study._storage


def trial_id(trial: optuna.Trial | FrozenTrial) -> int:
    """The storage id of a trial (not its number): heartbeats and user attrs of a trial
    another process owns are keyed by it (``_trial_id``)."""
    return int(trial._trial_id)


def fixed_params(trial: FrozenTrial) -> dict[str, Any]:
    """The settings ``enqueue_trial`` fixed for a queued (WAITING) trial: Optuna keeps them in
    the trial's ``fixed_params`` system attr until the trial is asked for."""
    fixed = trial.system_attrs.get("fixed_params") or {}
    return dict(fixed)


def contains(dist: Any, value: Any) -> bool:
    """Whether ``value`` is a point of the distribution ``dist`` (its ``_contains``, the check
    Optuna makes before warning that a fixed parameter is out of range)."""
    try:
        return bool(dist._contains(dist.to_internal_repr(value)))
    except (ValueError, TypeError):
        return False


def claim_waiting(study: optuna.Study, trial: FrozenTrial) -> bool:
    """Take a queued trial as ``study.ask()`` does (WAITING to RUNNING), so it can be told;
    False if another process took it first."""
    return bool(storage(study).set_trial_state_values(trial_id(trial), TrialState.RUNNING))


def stale_trial_ids(study: optuna.Study) -> list[int]:
    """Trials whose heartbeat stopped, on any host; empty without heartbeats.

    Optuna's public ``fail_stale_trials`` fails them at once; the sweeper first records why
    (reason ``interrupted``) and decides together with its own owner checks.
    """
    s = storage(study)
    if getattr(s, "get_heartbeat_interval", lambda: None)() is None:
        return []
    ids: list[int] = s._get_stale_trial_ids(study._study_id)
    return ids
