"""The search stops once no loader setting left can beat the fastest measured: recorded and
synthetic trials, replayed in the order a study measured them."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial

from hydra_plugins.loadertune_sweeper.plan import _ceiling
from hydra_plugins.loadertune_sweeper.plan._sweep_plan import SweepPlan

WKEY = "loader.num_workers"
PKEY = "loader.prefetch_factor"
SPACE = {WKEY: IntDistribution(0, 4), PKEY: CategoricalDistribution([1, 2, 4, 8])}
REPEAT = None
Row = tuple[int, int | None, float, bool, float | None, float | None, float] | None

# Two default studies of benchmarks/sweep_cost.py's cpu workload (2048 256 px JPEGs decoded
# on 2 CPUs under a 5 ms sleeping step), recorded 2026-12-07 at load 0.0 to 1.8, in trial
# order: (num_workers, prefetch_factor, ms per sample, pruned, data wait share, CPU % of
# one core, other work's CPU %); REPEAT for a trial answered from an earlier one.
CPU_STUDY_1: list[Row] = [
    (0, None, 2.3407, False, 0.909, 104.7, 2.7),  # 0
    (2, 2, 1.7261, False, 0.8671, 174.7, 4.8),  # 1
    (4, 2, 1.3708, False, 0.7985, 193.1, 5.5),  # 2
    REPEAT,  # 3
    REPEAT,  # 4
    (4, 1, 1.3035, False, 0.7858, 189.9, 5.6),  # 5
    (2, 1, 1.3127, False, 0.8311, 185.5, 4.1),  # 6
    (3, 4, 1.1512, False, 0.7997, 194.2, 5.2),  # 7: the fastest, w - 1 and w + 1 measured
    REPEAT,  # 8
    (1, 1, 2.4513, True, None, None, 0.0),  # 9
    (3, 2, 1.298, False, 0.8218, 193.2, 6.6),  # 10
]
CPU_STUDY_2: list[Row] = [
    (0, None, 2.6169, False, 0.9191, 116.7, 4.8),  # 0
    (2, 2, 1.5333, False, 0.8584, 178.7, 8.3),  # 1
    (4, 2, 1.3572, False, 0.7933, 191.4, 8.6),  # 2
    REPEAT,  # 3
    REPEAT,  # 4
    (4, 1, 1.3708, False, 0.8056, 192.3, 4.0),  # 5
    (2, 1, 1.3283, False, 0.8289, 185.5, 5.8),  # 6: the fastest from here on
    (3, 4, 1.4993, False, 0.7866, 191.8, 5.4),  # 7
    REPEAT,  # 8
    REPEAT,  # 9
    (1, 1, 2.5285, True, None, None, 0.0),  # 10: one worker fewer, pruned as slower
    (3, 8, 1.4282, False, 0.7926, 193.1, 5.7),  # 11
]


def _plan(tmp_path: Path, space: dict[str, Any] | None = None) -> SweepPlan:
    base = SimpleNamespace(trial=SimpleNamespace(nproc_per_node=1))
    space = dict(SPACE if space is None else space)
    return SweepPlan(space, {}, base, False, "", "s", tmp_path)  # type: ignore[arg-type]


def add_repeat(study: optuna.Study, of: FrozenTrial) -> None:
    """A trial answered from ``of``, as the sweep stores it: its value, no figures of its own."""
    study.add_trial(
        create_trial(
            params=of.params,
            distributions=of.distributions,
            value=of.value,
            user_attrs={"repeat_of": of.number},
        )
    )


def _add(study: optuna.Study, row: Row, **extra: Any) -> None:
    """One trial as the sweep stores it: its params, value and the figures its process left."""
    if row is None:  # a repeat: the value of an earlier trial, no figures of its own
        add_repeat(study, study.trials[0])
        return
    workers, prefetch, value, pruned, wait, cpu, other = row
    params: dict[str, Any] = {WKEY: workers}
    dists: dict[str, Any] = {WKEY: SPACE[WKEY]}
    if prefetch is not None:
        params[PKEY], dists[PKEY] = prefetch, SPACE[PKEY]
    attrs: dict[str, Any] = {"wall_s": 2.5, "peak_memory_mb": 300.0, "other_cpu_percent": other}
    attrs |= {"leaked_processes": 0, "shm_files_removed": 0, "oom_kills": 0, "timed_steps": 16}
    if not pruned:
        attrs |= {"data_wait_fraction": wait, "cpu_percent_mean": cpu, "steal_percent": 0.0}
    attrs |= extra
    state = TrialState.PRUNED if pruned else TrialState.COMPLETE
    study.add_trial(
        create_trial(
            params=params,
            distributions=dists,
            value=None if pruned else value,
            intermediate_values={16: value} if pruned else None,
            state=state,
            user_attrs=attrs,
        )
    )


def _replay(tmp_path: Path, rows: list[Row], cpus: int = 2) -> list[tuple[int, str]]:
    """After each trial, the sentence ``reached`` gives when it gives one."""
    study, plan, said = optuna.create_study(), _plan(tmp_path), []
    for row in rows:
        _add(study, row)
        why = _ceiling.reached(study, plan, cpus)
        if why is not None:
            said.append((len(study.trials) - 1, why))
    return said


@pytest.mark.parametrize(
    ("rows", "first_stop", "fastest"),
    [(CPU_STUDY_1, 7, "num_workers=3 (trial 7)"), (CPU_STUDY_2, 10, "num_workers=2 (trial 6)")],
)
def test_cpu_bound_decoding_stops_once_the_fastest_fills_the_cpus_and_its_neighbours_are_measured(
    tmp_path: Path, rows: list[Row], first_stop: int, fastest: str
) -> None:
    said = _replay(tmp_path, rows)
    assert said, "the recorded study never reached the CPU ceiling"
    at, why = said[0]
    assert at == first_stop
    assert why.startswith(fastest)
    assert "of the 2 usable CPUs busy" in why and "cannot add CPU" in why


def test_a_hidden_loader_stays_hidden_on_a_busy_machine(tmp_path: Path) -> None:
    busy = [(*row[:6], 90.0) if row else row for row in HIDDEN]
    assert [at for at, _ in _replay(tmp_path, busy)] == [3]


def test_the_cpus_are_not_full_on_a_machine_with_more_of_them(tmp_path: Path) -> None:
    # The same figures on 4 usable CPUs: 194% of one core is under half the machine.
    assert _replay(tmp_path, CPU_STUDY_1, cpus=4) == []


# A compute-bound step (the default small CNN): 0 workers wait, 1 worker nearly hides the
# loading, 2 hide it; 4 take CPU from the step.
HIDDEN: list[Row] = [
    (0, None, 3.00, False, 0.45, 190.0, 3.0),
    (2, 2, 1.60, False, 0.01, 195.0, 3.0),
    (4, 2, 1.75, False, 0.00, 198.0, 3.0),
    (1, 2, 1.70, False, 0.06, 192.0, 3.0),
]


def test_a_hidden_loader_stops_the_search_once_one_worker_fewer_was_measured(
    tmp_path: Path,
) -> None:
    said = _replay(tmp_path, HIDDEN)
    assert [at for at, _ in said] == [3]
    assert said[0][1].startswith("num_workers=2 (trial 1) hides the loader")
    assert "1.0% of its window, within the 2% tolerance" in said[0][1]


# Reads waiting on slow storage: the CPUs idle, every setting waits (io workload's shape).
IO_BOUND: list[Row] = [
    (0, None, 8.0, False, 0.90, 30.0, 3.0),
    (2, 2, 4.0, False, 0.80, 40.0, 3.0),
    (4, 2, 2.0, False, 0.60, 50.0, 3.0),
    (3, 2, 2.6, False, 0.70, 45.0, 3.0),
]


def test_loading_that_waits_on_reads_never_stops_the_search(tmp_path: Path) -> None:
    assert _replay(tmp_path, IO_BOUND) == []


@pytest.mark.parametrize(
    ("rows", "why"),
    [
        # The fastest has no measured neighbour below it: 1 worker may still do as well.
        (HIDDEN[:3], "w - 1 unmeasured"),
        # The fastest is in the range and nothing above it was measured.
        ([HIDDEN[0], HIDDEN[3], HIDDEN[1]], "nothing above it"),
        # Other work took a quarter of the CPUs in the fastest's trial: when it leaves, more
        # workers may have more CPU to use.
        ([*CPU_STUDY_1[:7], (3, 4, 1.1512, False, 0.7997, 194.2, 50.0)], "busy"),
    ],
)
def test_no_stop_without_the_neighbours_or_on_a_busy_machine(
    tmp_path: Path, rows: list[Row], why: str
) -> None:
    assert _replay(tmp_path, rows) == [], why


def test_no_stop_while_a_trial_waits_in_the_queue_or_a_batch_size_is_searched(
    tmp_path: Path,
) -> None:
    study = optuna.create_study()
    for row in HIDDEN:
        _add(study, row)
    assert _ceiling.reached(study, _plan(tmp_path), 2) is not None
    batch = {**SPACE, "loader.batch_size": CategoricalDistribution([16, 32])}
    assert _ceiling.reached(study, _plan(tmp_path, batch), 2) is None
    study.enqueue_trial({WKEY: 3, PKEY: 2})
    assert _ceiling.reached(study, _plan(tmp_path), 2) is None


def test_the_top_of_the_range_needs_nothing_above_it(tmp_path: Path) -> None:
    study = optuna.create_study()
    for row in (HIDDEN[0], (3, 2, 1.7, False, 0.06, 192.0, 3.0), (4, 2, 1.6, False, 0.0, 198, 3)):
        _add(study, row)
    why = _ceiling.reached(study, _plan(tmp_path), 2)
    assert why is not None and why.startswith("num_workers=4 (trial 2) hides the loader")


def test_a_repeat_answered_from_another_trial_is_not_a_measurement_of_its_own(
    tmp_path: Path,
) -> None:
    study = optuna.create_study()
    for row in (HIDDEN[0], HIDDEN[1], HIDDEN[2]):
        _add(study, row)
    # A trial at 1 worker that was only a repeat: 1 worker was not measured.
    _add(study, (1, 2, 1.7, False, 0.06, 192.0, 3.0), repeat_of=1)
    assert _ceiling.reached(study, _plan(tmp_path), 2) is None


# The default compute-bound workload at 17:21 UTC on 2026-12-07 (load 0.6 to 1.5), where the
# step's own threads use both CPUs: 0 workers is the fastest, and every worker kept the CPUs
# 93% busy yet was slower (trials 0 to 3 as the study measured them).
IN_PROCESS: list[Row] = [
    (0, None, 1.7268, False, 0.442, 159.8, 5.4),
    (2, 2, 2.0533, False, 0.05, 182.1, 5.6),
    (4, 2, 1.9492, False, 0.046, 186.3, 1.6),
    (1, 2, 1.9032, False, 0.041, 186.0, 3.7),
]


def test_loading_in_the_training_process_fastest_stops_once_one_worker_fills_the_cpus(
    tmp_path: Path,
) -> None:
    said = _replay(tmp_path, IN_PROCESS)
    assert [at for at, _ in said] == [3]  # not before one worker was measured
    assert said[0][1].startswith("num_workers=0 (trial 0) is the fastest: one worker (trial 3)")
    assert "kept 93% of the 2 usable CPUs busy" in said[0][1]


@pytest.mark.parametrize(
    ("one", "why"),
    [
        ((1, 2, 1.9032, False, 0.041, 150.0, 3.7), "one worker left a CPU idle"),
        ((1, 2, 1.9032, False, 0.041, 186.0, 60.0), "other work took a third of the CPUs"),
    ],
)
def test_no_stop_at_0_workers_while_one_worker_may_add_cpu(
    tmp_path: Path, one: Row, why: str
) -> None:
    assert _replay(tmp_path, [*IN_PROCESS[:3], one]) == [], why
