"""Sweeps in a subprocess and the stores they leave, shared by the end-to-end tests: ``loadertune
-m`` with tiny sizes or on the faulty dataset of ``fixtures_pkg/faulty_data.py``, and readers of
its Optuna study and MLflow runs."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from tests._cli import made_mlflow_store, run_cli, start_cli, sweep_args

NAMED = ["hydra.sweeper.study_name=s", "model=simulated", "model.step_ms=2"]


@dataclass
class Swept:
    """A finished sweep shared by the tests that read it: where it wrote, what it printed."""

    out: Path
    proc: subprocess.CompletedProcess[str]


def sweep(
    out: Path, *overrides: str, verdict: bool = False, fresh_store: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run ``loadertune -m`` with tiny sizes, writing everything under ``out``.

    The end-of-sweep verdict (re-measurements) is skipped unless ``verdict`` is set. The
    MLflow store is an empty one made ahead (:func:`tests._cli.made_mlflow_store`) unless
    ``fresh_store`` is set: then the sweep makes it, as a first sweep does.
    """
    if not verdict:
        overrides = ("hydra.sweeper.verdict_repeats=0", *overrides)
    if not fresh_store:
        made_mlflow_store(out)
    return run_cli(out, *sweep_args(out, *overrides))


def study_at(out: Path, name: str = "s") -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{out / 'optuna.db'}")


def finished(out: Path, name: str = "s") -> list[optuna.trial.FrozenTrial]:
    """The study's ended trials (enqueued baselines may still be waiting)."""
    return [t for t in study_at(out, name).trials if t.state.is_finished()]


def mlflow_runs(out: Path) -> tuple[Any, list[Any], Any]:
    """(sweep parent runs, trial child runs, client) in ``out``'s MLflow store."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("loadertune")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("loadertune.kind") == "sweep"]
    children = [r for r in runs if r.data.tags.get("loadertune.kind") == "trial"]
    return parents, children, client


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


SLOW = [
    "+dataset.mode=slow",
    "+dataset.delay_s=0.05",
    "trial.steps=40",
    "loader.num_workers=choice(0,1)",
    # 0 and 1 workers read equally fast here (within 1%), so on a busy machine the median
    # pruner may stop either one; these tests are about interrupts, not pruning.
    "hydra.sweeper.pruner=none",
]


def faulty_sweep(out: Path, *overrides: str, wait: bool = True) -> subprocess.Popen[str]:
    """``loadertune -m`` on the faulty dataset under ``out``, its MLflow store made ahead
    (:func:`tests._cli.made_mlflow_store`); waited for unless ``wait`` is false."""
    made_mlflow_store(out)
    proc = start_cli(out, "-m", f"paths.output_root={out}", *FAULTY, *overrides)
    if wait:
        proc.wait(timeout=600)
    return proc


def running_trial(out: Path, after_complete: int = 0) -> bool:
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


def wait_for(predicate: object, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError("condition not met in time")
