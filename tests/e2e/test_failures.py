"""Trials that crash, hang or exhaust memory, end to end: classified, recorded in both stores,
cleaned up (the classification itself: ``record/test_failures.py``).

The datasets in ``fixtures_pkg/faulty_data.py`` really do it: a worker segfaults, raises
SIGBUS, is SIGKILLed, hangs, leaks memory; a dataset cannot be pickled; a trial process is
SIGKILLed; a dataset always raises. The sweep process is killed and resumed, and Ctrl-C'd.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from loadertune.errors import ExitStatus
from tests._processes import processes_under
from tests._sweeps import (
    SLOW,
    faulty_sweep,
    finished,
    mlflow_runs,
    running_trial,
    study_at,
    wait_for,
)


def shm_torch_files() -> set[str]:
    return {p.name for p in Path("/dev/shm").iterdir() if p.name.startswith("torch_")}


def leaked_shm(before: set[str], settle_s: float = 2.0) -> set[str]:
    """``torch_*`` files in /dev/shm that were not there ``before`` and stay: a segment that
    another test's workers (run beside this one) create and unlink in passing is not a leak."""
    new = shm_torch_files() - before
    if new:
        time.sleep(settle_s)
        new &= shm_torch_files()
    return new


CASES = [
    # (mode, num_workers, start method, expected state, expected reason)
    ("ok", 2, "fork", TrialState.COMPLETE, None),
    ("segfault", 2, "fork", TrialState.FAIL, "worker_crashed"),
    ("sigbus", 2, "fork", TrialState.PRUNED, "shm_exhausted"),
    ("sigkill_worker", 2, "fork", TrialState.PRUNED, "worker_oom"),
    ("hang", 2, "fork", TrialState.FAIL, "timeout"),
    ("leak", 2, "fork", TrialState.PRUNED, "memory_budget"),
    ("unpicklable", 1, "spawn", TrialState.PRUNED, "unpicklable"),
    ("kill_trial", 0, "fork", TrialState.FAIL, "trial_killed"),
    ("ok", 0, "fork", TrialState.COMPLETE, None),
]


@pytest.mark.slow
def test_sweep_through_crashes_hangs_and_leaks(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(storage=storage, study_name="s")
    for mode, workers, ctx, _, _ in CASES:
        study.enqueue_trial(
            {
                "+dataset.mode": mode,
                "loader.num_workers": workers,
                "loader.multiprocessing_context": ctx,
            }
        )
    shm_before = shm_torch_files()
    proc = faulty_sweep(
        tmp_path,
        f"hydra.sweeper.n_trials={len(CASES)}",
        "+dataset.mode=choice(ok,segfault,sigbus,sigkill_worker,hang,leak,unpicklable,kill_trial)",
        "loader.num_workers=choice(0,1,2)",
        "loader.multiprocessing_context=choice(fork,spawn)",
        # 10 s: at load 12 the leak trial took over 5 s to its first batch and was called
        # hung before its workers passed the memory budget.
        "hydra.sweeper.stall_timeout_s=10",
        "hydra.sweeper.memory_budget_mb=1200",
        "+dataset.leak_mb=150",
        "hydra.sweeper.pruner=none",
    )
    _, err = proc.communicate()
    assert proc.returncode == 0, err
    trials = study_at(tmp_path).trials
    assert len(trials) == len(CASES)
    for trial, (mode, _, _, state, reason) in zip(trials, CASES, strict=True):
        assert (mode, trial.state, trial.user_attrs.get("reason")) == (mode, state, reason)
        if reason is not None:
            assert trial.user_attrs["error"]
    hang = trials[4]
    assert 10 <= hang.user_attrs["wall_s"] < 60
    assert "stall limit (10 s, hydra.sweeper.stall_timeout_s;" in hang.user_attrs["error"]
    assert hang.user_attrs["error"].endswith("raise hydra.sweeper.stall_timeout_s")  # the fix
    assert study_at(tmp_path).best_trial.params["+dataset.mode"] == "ok"

    parents, children, client = mlflow_runs(tmp_path)
    assert [p.info.status for p in parents] == ["FINISHED"]
    status = {
        TrialState.COMPLETE: "FINISHED",
        TrialState.PRUNED: "KILLED",
        TrialState.FAIL: "FAILED",
    }
    by_number = {int(c.data.tags["optuna.trial_number"]): c for c in children}
    for trial in trials:
        child = by_number[trial.number]
        assert child.info.status == status[trial.state]
        assert child.data.tags.get("reason") == trial.user_attrs.get("reason")
        if trial.state != TrialState.COMPLETE:
            names = {a.path for a in client.list_artifacts(child.info.run_id)}
            assert "error.txt" in names
    assert not processes_under(tmp_path)
    assert not leaked_shm(shm_before)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["raise", "corrupt"])
def test_a_dataset_bug_stops_the_sweep_early(tmp_path: Path, mode: str) -> None:
    """The same error twice stops the sweep, also when each message names another index."""
    proc = faulty_sweep(
        tmp_path,
        "hydra.sweeper.n_trials=6",
        f"+dataset.mode={mode}",
        "loader.num_workers=choice(0,1,2)",
    )
    out, err = proc.communicate()
    assert proc.returncode == ExitStatus.DATASET_BUG, err
    assert "bug in the dataset" in out
    assert "ValueError: corrupt record" in out
    trials = finished(tmp_path)
    assert len(trials) == 2
    assert {t.user_attrs["reason"] for t in trials} == {"dataset_error"}
    parents, children, _ = mlflow_runs(tmp_path)
    assert [p.info.status for p in parents] == ["FAILED"]
    assert sorted(c.data.tags["reason"] for c in children) == ["dataset_error"] * 2


@pytest.mark.slow
def test_killed_sweep_resumes_and_both_stores_agree(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(storage=storage, study_name="s")
    for workers in (0, 1, 0):
        study.enqueue_trial({"loader.num_workers": workers})
    proc = faulty_sweep(tmp_path, "hydra.sweeper.n_trials=3", *SLOW, wait=False)
    wait_for(lambda: running_trial(tmp_path, after_complete=1))
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)
    # Its output ends once no process of it is left: a worker orphaned by the kill would
    # hold the pipes open (worker_tether), and the wait would never end.
    proc.communicate(timeout=600)
    wait_for(lambda: not processes_under(tmp_path), timeout=120)

    again = faulty_sweep(tmp_path, "hydra.sweeper.n_trials=1", *SLOW)
    _, err = again.communicate()
    assert again.returncode == 0, err
    trials = study_at(tmp_path).trials
    done = [TrialState.COMPLETE, TrialState.FAIL, TrialState.COMPLETE]
    assert [t.state for t in trials[:3]] == done
    assert trials[1].user_attrs["reason"] == "interrupted"
    # The queued 0 workers is answered from trial 0, so it does not use up n_trials=1: the
    # resumed sweep goes on until it has measured one setting.
    assert trials[2].user_attrs["repeat_of"] == 0
    later = [(t.number, t.state.name, t.user_attrs.get("reason")) for t in trials[3:]]
    assert all(state == "COMPLETE" for _, state, _ in later), (later, err)
    assert sum("repeat_of" not in t.user_attrs for t in trials[2:]) == 1
    parents, children, _ = mlflow_runs(tmp_path)
    assert sorted(p.info.status for p in parents) == ["FINISHED", "KILLED"]
    by_number = {int(c.data.tags["optuna.trial_number"]): c for c in children}
    assert sorted(by_number) == [t.number for t in trials if "repeat_of" not in t.user_attrs]
    assert len(children) == len(by_number)  # one run per measured trial: no repaired copy
    assert not any("loadertune.recovered" in c.data.tags for c in children)
    assert by_number[1].info.status == "FAILED"
    assert by_number[1].data.tags["reason"] == "interrupted"
    assert {c.info.status for n, c in by_number.items() if n != 1} == {"FINISHED"}
    runs = [*parents, *children]
    assert all(r.info.status != "RUNNING" for r in runs)


@pytest.mark.slow
def test_ctrl_c_records_the_current_trial_and_exits(tmp_path: Path) -> None:
    proc = faulty_sweep(tmp_path, "hydra.sweeper.n_trials=3", *SLOW, wait=False)
    wait_for(lambda: running_trial(tmp_path))
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == ExitStatus.INTERRUPTED
    assert "interrupted" in out
    trials = finished(tmp_path)
    assert trials[-1].state == TrialState.FAIL
    assert trials[-1].user_attrs["reason"] == "interrupted"
    parents, children, _ = mlflow_runs(tmp_path)
    assert [p.info.status for p in parents] == ["KILLED"]
    assert len(children) == len(trials)
    wait_for(lambda: not processes_under(tmp_path), timeout=120)
