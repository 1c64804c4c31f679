"""Trials that crash, hang or exhaust memory: classified, recorded in both stores, cleaned up.

The datasets in ``fixtures_pkg/faulty_data.py`` really do it: a worker segfaults, raises
SIGBUS, is SIGKILLed, hangs, leaks memory; a dataset cannot be pickled; a trial process is
SIGKILLed; a dataset always raises. The sweep process is killed and resumed, and Ctrl-C'd.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import optuna
import psutil
import pytest
import torch
import torch.utils.data as torch_data
from optuna.trial import TrialState

from loadertune.exit_status import ExitStatus
from loadertune.record._failures import (
    INFEASIBLE,
    REASONS,
    Reason,
    TrialFailure,
    classify,
    classify_exit,
)
from tests._cli import made_mlflow_store, start_cli
from tests.test_sweep import finished, mlflow_runs, study_at

FAULTY = [
    "dataset=custom",
    "dataset._target_=faulty_data.Faulty",
    "model=simulated",
    "model.step_ms=1",
    "loader.batch_size=4",
    "trial.warmup_steps=1",
    "trial.steps=8",
    "hydra.sweeper.study_name=s",
    "hydra.sweeper.max_failure_rate=1.0",
    "hydra.sweeper.verdict_repeats=0",
]


def faulty_sweep(out: Path, *overrides: str, wait: bool = True) -> subprocess.Popen[str]:
    """``loadertune -m`` on the faulty dataset under ``out``, its MLflow store made ahead
    (:func:`tests._cli.made_mlflow_store`); waited for unless ``wait`` is false."""
    made_mlflow_store(out)
    proc = start_cli(out, "-m", f"paths.output_root={out}", *FAULTY, *overrides)
    if wait:
        proc.wait(timeout=600)
    return proc


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


def processes_under(path: Path) -> list[psutil.Process]:
    """Live processes whose command line mentions ``path`` (a sweep, its trials, workers)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if any(str(path) in part for part in (p.info["cmdline"] or [])):
            found.append(p)
    return found


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


def _wait_for(predicate: object, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


def _running_trial(out: Path, after_complete: int = 0) -> bool:
    """A trial is running, after ``after_complete`` trials completed.

    Read from SQLite read-only: opening the study with Optuna would create its tables, and a
    reader racing the sweep's own creation of the database can make the sweep's start fail.
    """
    db = out / "optuna.db"
    if not db.exists():
        return False
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)) as con:
            states = [state for (state,) in con.execute("SELECT state FROM trials")]
    except sqlite3.Error:  # not created yet, or busy: look again
        return False
    return "RUNNING" in states and states.count("COMPLETE") >= after_complete


SLOW = [
    "+dataset.mode=slow",
    "+dataset.delay_s=0.05",
    "trial.steps=40",
    "loader.num_workers=choice(0,1)",
    # 0 and 1 workers read equally fast here (within 1%), so on a busy machine the median
    # pruner may stop either one; these tests are about interrupts, not pruning.
    "hydra.sweeper.pruner=none",
]


@pytest.mark.slow
def test_killed_sweep_resumes_and_both_stores_agree(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(storage=storage, study_name="s")
    for workers in (0, 1, 0):
        study.enqueue_trial({"loader.num_workers": workers})
    proc = faulty_sweep(tmp_path, "hydra.sweeper.n_trials=3", *SLOW, wait=False)
    _wait_for(lambda: _running_trial(tmp_path, after_complete=1))
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)
    # Its output ends once no process of it is left: a worker orphaned by the kill would
    # hold the pipes open (worker_tether), and the wait would never end.
    proc.communicate(timeout=600)
    _wait_for(lambda: not processes_under(tmp_path), timeout=120)

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
    _wait_for(lambda: _running_trial(tmp_path))
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
    _wait_for(lambda: not processes_under(tmp_path), timeout=120)


@pytest.mark.parametrize(
    ("exc_type", "text", "reason"),
    [
        (
            "RuntimeError",
            "DataLoader worker (pid 12) is killed by signal: Bus error. It is "
            "possible that dataloader's workers are out of shared memory.",
            "shm_exhausted",
        ),
        ("RuntimeError", "DataLoader worker (pid 99) is killed by signal: Killed.", "worker_oom"),
        (
            "RuntimeError",
            "Too many open files. Communication with the workers is no longer possible.",
            "fd_exhausted",
        ),
        ("RuntimeError", "DataLoader worker (pid(s) 5, 6) exited unexpectedly", "worker_crashed"),
        (
            "RuntimeError",
            "DataLoader worker (pid 7) is killed by signal: Segmentation fault.",
            "worker_crashed",
        ),
        ("ValueError", "Caught ValueError in DataLoader worker process 2.", "dataset_error"),
        ("PicklingError", "Can't pickle <function <lambda>>", "unpicklable"),
        ("AttributeError", "Can't get local object 'f.<locals>.g'", "unpicklable"),
        ("ConfigError", "loader.batch_size=0: ...", "invalid_config"),
        ("OutOfMemoryError", "CUDA out of memory. Tried to allocate", "cuda_oom"),
        ("InfeasibleSetting", "[fd_exhausted] about 300 descriptors", "fd_exhausted"),
        ("KeyError", "'label'", "dataset_error"),
        ("MemoryError", "Traceback ...\nMemoryError", "memory_budget"),
        ("RuntimeError", "DefaultCPUAllocator: can't allocate memory: you tried", "memory_budget"),
    ],
)
def test_classification_table(exc_type: str, text: str, reason: str) -> None:
    assert classify(exc_type, text) == reason
    assert reason in REASONS


def test_exit_status_classification() -> None:
    assert classify_exit(-9) == "trial_killed"
    assert classify_exit(1) == "trial_crashed"
    assert "memory_budget" in INFEASIBLE and "timeout" not in INFEASIBLE


def test_a_reason_is_its_stored_word() -> None:
    """Optuna attrs, MLflow tags and messages get the word itself, as before the enum."""
    reason = classify("InfeasibleSetting", "[shm_exhausted] about 900 MB in flight")
    assert reason is Reason.SHM_EXHAUSTED
    assert str(reason) == f"{reason}" == "shm_exhausted" and type(str(reason)) is str
    assert json.dumps({"reason": reason}) == '{"reason": "shm_exhausted"}'
    assert str(TrialFailure(Reason.TIMEOUT, "hung")) == "[timeout] hung"
    assert set(REASONS) == set(Reason)  # each reason documented


@pytest.mark.parametrize(
    ("codes", "reason"),
    [
        ([None, None], None),
        ([0, None], None),
        ([None, -signal.SIGKILL], Reason.WORKER_OOM),
        ([-signal.SIGSEGV], Reason.WORKER_CRASHED),
        ([1], Reason.WORKER_CRASHED),
        ([-signal.SIGKILL, -signal.SIGBUS], Reason.SHM_EXHAUSTED),
    ],
)
def test_a_dead_workers_exit_code_names_how_it_died(
    codes: list[int | None], reason: Reason | None
) -> None:
    from loadertune.record._failures import worker_death

    assert worker_death(codes) == reason


class _KilledOnCue(torch_data.Dataset[int]):
    """Its worker SIGKILLs itself once ``cue`` exists, so the test decides when."""

    def __init__(self, cue: Path) -> None:
        self.cue = cue

    def __len__(self) -> int:
        return 1000

    def __getitem__(self, index: int) -> int:
        if self.cue.exists():
            os.kill(os.getpid(), signal.SIGKILL)
        return index


def test_a_worker_killed_unseen_by_pytorchs_sigchld_handler_is_still_out_of_memory(
    tmp_path: Path,
) -> None:
    """PyTorch's liveness check says only "exited unexpectedly"; the exit code says SIGKILL.

    Which of PyTorch's two checks sees a killed worker first is a race on a busy machine; the
    worker is taken off the SIGCHLD handler here so the quieter check is the one that answers.
    """
    from loadertune import _torch_private
    from loadertune.loader._step_loop import StepLoop, synchronizer
    from loadertune.measure._accelerator import copy_timer
    from loadertune.measure._timing import StepTimer

    cue = tmp_path / "cue"
    loader = torch_data.DataLoader(
        _KilledOnCue(cue), num_workers=1, prefetch_factor=1, multiprocessing_context="fork"
    )
    device = torch.device("cpu")
    loop = StepLoop(
        loader,
        device,
        False,
        lambda batch: None,
        copy_timer(device, synchronizer(device)),
        lambda batch: (batch, None),
    )
    loop.first_batch()
    _torch_private.unwatch_workers(loop._it)
    cue.touch()
    with pytest.raises(TrialFailure) as failure:
        for _ in range(50):
            loop.step(StepTimer())
    assert failure.value.reason is Reason.WORKER_OOM
    assert "exited unexpectedly" in str(failure.value)
    loop.close()
