"""The search stops once the tail is ridden out: on storage whose rare reads stall, after the
doubling path, the bisection and the prefetch depth stepped at the fewest sufficient count;
two recorded studies replayed in the order they measured, and synthetic depths."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from hydra_plugins.loadertune_sweeper.plan import _ceiling, _refine
from hydra_plugins.loadertune_sweeper.plan._guess import WorkersRange
from hydra_plugins.loadertune_sweeper.plan._sweep_plan import SweepPlan
from tests.sweeper.plan.test_ceiling import add_repeat

WKEY = "loader.num_workers"
PKEY = "loader.prefetch_factor"
SPACE = {WKEY: IntDistribution(0, 20), PKEY: CategoricalDistribution([1, 2, 4, 8])}
WIDENED = WorkersRange(WKEY, (0, 4, 1), 20)  # the guess widened 0..4 to 0..20 for I/O
Row = tuple[int, int | None, float, float, float] | None  # None: a repeat of an earlier trial

# Two default studies of benchmarks/sweep_cost.py's stalls workload (object-store reads of
# 0.5 ms, one in forty stalled 120 ms, batch 32, a 20 ms step, 2 CPUs), recorded 2026-12-07
# at load 0.7 to 1.2, in trial order: (num_workers, prefetch_factor, ms per sample, data wait
# share, other work's CPU %). The step waits 3-8% of its window on the stalls at any count,
# so the loader is never "hidden" by the first ceiling.
STUDY_A: list[Row] = [
    (0, None, 4.6291, 0.8601, 2.0),  # 0: default
    (2, 2, 6.0723, 0.7391, 1.6),  # 1: start at 2
    (4, 2, 1.4508, 0.5707, 4.6),  # 2: rule of thumb
    (13, 2, 0.6913, 0.0632, 3.4),  # 3: the model-based guess
    None,  # 4: the doubling path's 4, answered from trial 2
    (8, 2, 0.776, 0.1625, 7.0),  # 5
    (16, 2, 0.692, 0.0602, 2.2),  # 6
    (20, 2, 0.6999, 0.0725, 26.7),  # 7: the range's top
    (10, 2, 0.7791, 0.169, 5.0),  # 8: bisection between 8 and 13
    (13, 4, 0.6748, 0.0292, 0.0),  # 9: the depth doubled at 13, 2.4% faster
]
STUDY_B: list[Row] = [
    (0, None, 4.6762, 0.8615, 2.2),
    (2, 2, 2.3387, 0.7073, 3.8),
    (4, 2, 1.1997, 0.4576, 9.1),
    (13, 2, 0.6888, 0.0579, 5.6),
    None,
    (8, 2, 0.81, 0.162, 8.9),
    (16, 2, 0.7055, 0.0754, 12.1),
    (20, 2, 0.6942, 0.0683, 9.9),
    (10, 2, 0.7058, 0.0864, 3.3),  # 8: within 5% of the fastest: 10 is the fewest sufficient
    (10, 4, 0.6901, 0.0612, 6.7),  # 9: the depth doubled at 10, 2.2% faster
]


def _plan(tmp_path: Path) -> SweepPlan:
    base = SimpleNamespace(trial=SimpleNamespace(nproc_per_node=1))
    return SweepPlan(dict(SPACE), {}, base, False, "", "s", tmp_path)  # type: ignore[arg-type]


def _add(study: optuna.Study, row: Row) -> None:
    """One trial as the sweep stores it: its params, value and the figures its process left."""
    if row is None:
        add_repeat(study, study.trials[2])
        return
    workers, prefetch, value, wait, other = row
    params: dict[str, Any] = {WKEY: workers}
    dists: dict[str, Any] = {WKEY: SPACE[WKEY]}
    if prefetch is not None:
        params[PKEY], dists[PKEY] = prefetch, SPACE[PKEY]
    attrs = {"wall_s": 2.5, "peak_memory_mb": 400.0, "other_cpu_percent": other}
    attrs |= {"leaked_processes": 0, "shm_files_removed": 0, "oom_kills": 0, "timed_steps": 40}
    attrs |= {"data_wait_fraction": wait, "cpu_percent_mean": 40.0, "steal_percent": 0.0}
    study.add_trial(
        create_trial(
            params=params,
            distributions=dists,
            value=value,
            state=TrialState.COMPLETE,
            user_attrs=attrs,
        )
    )


def _study(rows: list[Row], widened: bool = True) -> optuna.Study:
    study = optuna.create_study()
    if widened:
        study.set_user_attr("workers_range", WIDENED.as_attrs())
    for row in rows:
        _add(study, row)
    return study


@pytest.mark.parametrize(
    ("rows", "depth_at", "fastest", "fewest"),
    [(STUDY_A, 13, "num_workers=13 (trial 9)", 13), (STUDY_B, 10, "num_workers=13 (trial 3)", 10)],
)
def test_a_recorded_heavy_tail_study_steps_the_depth_once_then_stops(
    tmp_path: Path, rows: list[Row], depth_at: int, fastest: str, fewest: int
) -> None:
    plan = _plan(tmp_path)
    before = _study(rows[:9])
    # After the bisection: the depth doubled at the fewest sufficient count, nothing stops yet.
    assert _refine.next_count(before, plan) is None
    assert _refine.next_depth(before, plan) == {WKEY: depth_at, PKEY: 4}
    assert _ceiling.reached(before, plan, 2) is None
    after = _study(rows)
    assert _refine.next_depth(after, plan) is None  # 4 bought under 5%: settled
    why = _ceiling.reached(after, plan, 2)
    assert why is not None and why.startswith(f"{fastest} rides out the tail")
    assert f"{fewest} workers are the fewest within 5% of it" in why
    assert "up to 4" in why and "more workers were no faster" in why
    # The fewest sufficient count is what the verdict's pick is held to (in B, 10 below the
    # fastest 13): the workers past it bought under 5% and cost memory and CPU.
    stop = _ceiling.ceiling(after, plan, 2)
    assert stop is not None and stop.enough == fewest


def test_a_range_the_guess_did_not_widen_never_steps_the_depth(tmp_path: Path) -> None:
    plan, study = _plan(tmp_path), _study(STUDY_A, widened=False)
    assert _refine.next_depth(study, plan) is None
    assert _refine.depth_settled(study, plan) is None
    assert _ceiling.reached(study, plan, 2) is None


def test_a_depth_that_buys_more_than_5_percent_is_doubled_again(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    study = _study([*STUDY_A[:9], (13, 4, 0.62, 0.02, 1.0)])  # 10% faster than prefetch 2
    assert _refine.next_depth(study, plan) == {WKEY: 13, PKEY: 8}
    assert _ceiling.reached(study, plan, 2) is None
    _add(study, (13, 8, 0.61, 0.02, 1.0))
    why = _ceiling.reached(study, plan, 2)
    assert why is not None and "up to 8" in why
    study.enqueue_trial({WKEY: 6, PKEY: 2})  # nothing stops while a trial waits
    assert _ceiling.reached(study, plan, 2) is None
    assert _refine.next_depth(study, plan) is None


@pytest.mark.parametrize(
    ("depths", "choices", "expected"),
    [
        ({2: 1.0}, [1, 2, 4, 8], 4),
        ({2: 1.0, 4: 0.9}, [1, 2, 4, 8], 8),  # 10% bought: one more doubling
        ({2: 1.0, 4: 0.97}, [1, 2, 4, 8], None),  # 3%: settled
        ({2: 1.0, 4: 0.9, 8: 0.89}, [1, 2, 4, 8], None),
        ({2: 1.0, 4: 0.9, 8: 0.8}, [1, 2, 4, 8], None),  # no deeper choice
        ({1: 1.0}, [1, 2, 4, 8], 2),  # PyTorch's 2 first: the ladder starts there
        ({2: math.inf}, [1, 2, 4, 8], 4),  # a pruned depth: the next one is measured
        ({2: 1.0}, [1, 2], None),
        ({4: 0.9}, [2, 4, 8], 2),
    ],
)
def test_the_depth_ladder(depths: dict[int, float], choices: list[int], expected: int) -> None:
    assert _refine.deeper(depths, choices) == expected


@pytest.mark.parametrize(
    ("times", "expected"),
    [
        ({0: 4.6, 8: 0.78, 10: 0.78, 13: 0.69, 16: 0.69, 20: 0.70}, 13),
        ({0: 4.6, 8: 0.78, 13: 0.69, 16: 0.69}, None),  # the bisection still measures 10
        ({0: 1.0, 2: 1.2}, None),  # the fewest sufficient is the fewest measured
        ({}, None),
    ],
)
def test_the_fewest_sufficient_count_once_bisected(
    times: dict[int, float], expected: int | None
) -> None:
    assert _refine.edge(times) == expected


def test_the_edge_keeps_to_the_ranges_step() -> None:
    # On a grid of 16 nothing lies between 16 and 32, so the bisection is done at 32.
    times = {0: 9.0, 16: 0.61, 32: 0.40}
    assert _refine.edge(times) is None  # on a grid of 1 the bisection still measures 24
    assert _refine.edge(times, low=0, step=16) == 32
