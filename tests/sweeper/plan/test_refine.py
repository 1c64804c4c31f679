"""A wide num_workers range searched in geometric steps, then by bisection towards the fewest
workers as fast as the most: synthetic measurements, exact counts."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from hydra_plugins.loadertune_sweeper.plan import _baselines, _refine
from hydra_plugins.loadertune_sweeper.plan._sweep_plan import SweepPlan

WKEY = "loader.num_workers"
PKEY = "loader.prefetch_factor"
SPACE = {WKEY: IntDistribution(0, 38), PKEY: CategoricalDistribution([1, 2, 4, 8])}

# An object store on 2 CPUs: each read waits 8 ms, 32 reads a batch, a 10 ms step; more
# workers help until about 24 (ms per sample, shaped like the measured grid).
OBJECT_STORE = {0: 8.7, 2: 4.4, 4: 2.2, 8: 1.15, 16: 0.61, 20: 0.52, 22: 0.48, 24: 0.46}


def store_time(workers: int) -> float:
    """Time per sample at ``workers`` on the object store above (flat from 24 on)."""
    known = [w for w in OBJECT_STORE if w <= workers]
    return OBJECT_STORE[max(known)] if workers < 24 else 0.46


@pytest.mark.parametrize(
    ("times", "expected"),
    [
        # 25 within 5% of 32, 16 not: halfway, 20.
        ({0: 8.7, 16: 0.61, 25: 0.42, 32: 0.40}, 20),
        ({0: 8.7, 8: 1.2, 32: 0.40}, 20),
        ({0: 8.7, 8: 1.2, 20: 0.50, 32: 0.40}, 26),
        # 20 to 25 is within a quarter of 25: known closely enough.
        ({16: 0.61, 20: 0.52, 25: 0.42, 32: 0.40}, None),
        # The fastest count is the fewest measured: nothing below it to close in on.
        ({0: 1.0, 2: 1.2, 4: 1.3}, None),
        # A gap of 2 workers is left to the sampler or the walk (the default small range,
        # whose baselines measure 0, 2 and 4 on 2 CPUs); one of 4 is halved.
        ({0: 3.0, 2: 1.0, 4: 1.01}, None),
        ({0: 3.0, 2: 1.5, 4: 1.0}, None),
        ({0: 3.0, 4: 1.0}, 2),
        # A pruned or failed count (inf) is not sufficient.
        ({0: 3.0, 8: math.inf, 16: 1.0}, 12),
        ({8: math.inf}, None),
        ({}, None),
    ],
)
def test_the_midpoint_between_the_fewest_sufficient_and_the_most_insufficient(
    times: dict[int, float], expected: int | None
) -> None:
    assert _refine.midpoint(times) == expected


def test_the_midpoint_keeps_to_the_ranges_step() -> None:
    assert _refine.midpoint({0: 9.0, 16: 0.61, 32: 0.40}, low=0, step=4) == 24
    assert _refine.midpoint({0: 9.0, 16: 0.61, 32: 0.40}, low=1, step=5) == 21
    assert _refine.midpoint({0: 9.0, 8: 1.2, 32: 0.40}, low=0, step=16) == 16
    assert _refine.midpoint({0: 9.0, 16: 0.61, 32: 0.40}, low=0, step=16) is None


@pytest.mark.parametrize(
    ("high", "path"),
    [(38, [2, 4, 8, 16, 32, 38]), (16, [2, 4, 8, 16]), (6, [2, 4, 6]), (4, [2, 4]), (1, [1])],
)
def test_the_doubling_path_ends_at_the_ranges_top(high: int, path: list[int]) -> None:
    assert _baselines.rungs(high) == path


def _trial(workers: int, value: float | None, **attrs: Any) -> optuna.trial.FrozenTrial:
    params: dict[str, Any] = {WKEY: workers}
    dists: dict[str, Any] = {WKEY: SPACE[WKEY]}
    if workers:
        params[PKEY], dists[PKEY] = 2, SPACE[PKEY]
    state = TrialState.COMPLETE if value is not None else TrialState.PRUNED
    return create_trial(
        params=params, distributions=dists, value=value, state=state, user_attrs=attrs
    )


def test_after_32_beats_16_the_last_rung_is_the_top_and_the_one_before_it_counts() -> None:
    study = optuna.create_study()
    study.add_trial(_trial(16, 0.61, baseline="doubling"))
    study.add_trial(_trial(32, 0.42, baseline="doubling"))
    assert _baselines.next_rung(study, study.trials[-1], SPACE) == {WKEY: 38, PKEY: 2}
    study.add_trial(_trial(38, 0.415, baseline="doubling"))  # not 2% better than 32: stop
    assert _baselines.next_rung(study, study.trials[-1], SPACE) is None


def _plan(tmp_path: Path, space: dict[str, Any]) -> SweepPlan:
    base = SimpleNamespace(trial=SimpleNamespace(nproc_per_node=1))
    return SweepPlan(dict(space), {}, base, False, "", "s", tmp_path)  # type: ignore[arg-type]


def test_a_study_closes_in_on_the_fewest_sufficient_workers_in_a_few_trials(
    tmp_path: Path,
) -> None:
    # The doubling path and the guess (25) measured; then each refinement is measured as
    # the loop would, until the count is known within a quarter.
    study = optuna.create_study()
    for workers in (0, 2, 8, 25, 4, 16, 32, 38):
        study.add_trial(_trial(workers, store_time(workers)))
    plan = _plan(tmp_path, SPACE)
    asked = []
    while (params := _refine.next_count(study, plan)) is not None:
        asked.append(params[WKEY])
        assert params[PKEY] == 2  # PyTorch's prefetch factor, as the doubling path's
        study.add_trial(_trial(params[WKEY], store_time(params[WKEY])))
    assert asked == [20]  # 16 < 20 < 25: 20 is 13% off 0.46, 25 within a quarter of it


def test_nothing_is_queued_while_a_trial_waits_or_for_a_choice_of_counts(
    tmp_path: Path,
) -> None:
    study = optuna.create_study()
    for workers in (0, 16, 32):
        study.add_trial(_trial(workers, store_time(workers)))
    plan = _plan(tmp_path, SPACE)
    assert _refine.next_count(study, plan) == {WKEY: 24, PKEY: 2}
    study.enqueue_trial({WKEY: 2})
    assert _refine.next_count(study, plan) is None
    choice = {WKEY: CategoricalDistribution([0, 16, 32])}
    assert _refine.next_count(optuna.create_study(), _plan(tmp_path, choice)) is None


def test_a_pruned_count_counts_as_too_slow_and_is_not_asked_again(tmp_path: Path) -> None:
    study = optuna.create_study()
    for workers, value in ((0, 9.0), (16, None), (32, 0.40)):
        study.add_trial(_trial(workers, value))
    plan = _plan(tmp_path, SPACE)
    assert _refine.counts_measured(study, WKEY) == {0: 9.0, 16: math.inf, 32: 0.40}
    assert _refine.next_count(study, plan) == {WKEY: 24, PKEY: 2}
