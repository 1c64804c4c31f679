"""A sweep of this host that dies while another runs the same study (killed between two
trials, so it leaves no trial RUNNING for the other to fail) has its MLflow parent run ended
by the sweep that goes on, when that one ends: no run is left RUNNING for a dead process."""

from __future__ import annotations

import contextlib
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hydra_plugins.loadertune_sweeper._keys import RunKind, Tag
from tests._cli import start_cli
from tests.conftest import with_tiny

pytestmark = pytest.mark.slow
STEP = ["model=simulated", "model.step_ms=2"]


def _complete(db: Path) -> int:
    """COMPLETE trials in the study, read-only."""
    if not db.exists():
        return 0
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)) as c:
            return len(list(c.execute("SELECT 1 FROM trials WHERE state = 'COMPLETE'")))
    except sqlite3.Error:
        return 0


def test_a_sweep_that_died_meanwhile_has_its_run_ended_by_the_one_that_goes_on(
    tmp_path: Path,
) -> None:
    from mlflow import MlflowClient

    sweep = start_cli(
        tmp_path, "-m", f"paths.output_root={tmp_path}", *with_tiny(STEP),
        "hydra.sweeper.study_name=s", "hydra.sweeper.n_trials=6",
        "loader.num_workers=choice(0,1,2)", "hydra.sweeper.verdict_repeats=1",
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while _complete(tmp_path / "optuna.db") < 1 and sweep.poll() is None:
            assert time.monotonic() < deadline, "no trial completed"
            time.sleep(0.2)
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)  # fmt: skip
        client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
        experiment = client.get_experiment_by_name("loadertune")
        assert experiment is not None
        other = client.create_run(experiment.experiment_id, run_name="a sweep killed", tags={
            Tag.KIND: RunKind.SWEEP, "optuna.study_name": "s", Tag.HOST: socket.gethostname(),
            Tag.PID: dead.stdout.strip(),
        }).info.run_id  # fmt: skip
        out, err = sweep.communicate(timeout=600)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.communicate()
    assert sweep.returncode == 0, err[-3000:]
    assert client.get_run(other).info.status == "KILLED"
    assert "closed 1 MLflow run(s) of a sweep that died meanwhile" in " ".join(out.split())
    parents = client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`{Tag.KIND}` = '{RunKind.SWEEP}'"
    )
    assert sorted(p.info.status for p in parents) == ["FINISHED", "KILLED"]
