"""A tracking server killed mid-sweep: the sweep notices in seconds (bounded MLflow retries),
ends with exit status 5 in one line, Optuna keeps every trial, and a rerun with the server
back adds the trials MLflow lacks, so the two stores agree again."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from loadertune.errors import ExitStatus
from tests._cli import cli_env, start_cli
from tests._mlflow_server import free_port, mlflow_server_process

SWEEP = [
    "dataset=custom",
    "dataset._target_=faulty_data.Faulty",
    "+dataset.mode=slow",
    "model=simulated",
    "model.step_ms=1",
    "loader.batch_size=4",
    "trial.warmup_steps=1",
    "trial.steps=6",
    "hydra.sweeper.study_name=s",
    "hydra.sweeper.verdict_repeats=0",
    "loader.num_workers=choice(0,1,2)",
]


def _complete_trials(db: Path) -> int:
    """COMPLETE trials in the study, read-only (Optuna would create its tables)."""
    if not db.exists():
        return 0
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)) as c:
            return len(list(c.execute("SELECT 1 FROM trials WHERE state = 'COMPLETE'")))
    except sqlite3.Error:
        return 0


def _sweep(out: Path, uri: str, trials: int) -> subprocess.Popen[str]:
    """The sweep against ``uri``, no ``MLFLOW_*`` setting of the caller's reaching it."""
    args = [f"paths.output_root={out}", f"tracking.tracking_uri={uri}", *SWEEP]
    args.append(f"hydra.sweeper.n_trials={trials}")
    return start_cli(out, "-m", *args, env=cli_env(drop="MLFLOW_"))


@pytest.mark.slow
def test_a_server_killed_mid_sweep_ends_it_fast_and_a_rerun_fills_mlflow(tmp_path: Path) -> None:
    import optuna
    from mlflow import MlflowClient

    store, artifacts = f"sqlite:///{tmp_path / 'server.db'}", tmp_path / "artifacts"
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    with mlflow_server_process(store, artifacts, tmp_path, port=port) as server:
        proc = _sweep(out, server.uri, trials=8)
        deadline = time.monotonic() + 300
        while _complete_trials(out / "optuna.db") < 1 and proc.poll() is None:
            assert time.monotonic() < deadline, "no trial completed"
            time.sleep(0.2)
        server.kill()
        killed = time.monotonic()
        stdout, stderr = proc.communicate(timeout=600)
        noticed_s = time.monotonic() - killed
    assert proc.returncode == ExitStatus.INFRASTRUCTURE, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("loadertune: error: the MLflow tracking server http://127.0.0.1:")
    assert "stopped answering during the sweep" in last and "Fix: start the server" in last
    assert "Retrying" not in stdout + stderr  # urllib3's retries are not shown
    assert noticed_s < 120  # MLflow's default retries hold each write about 4 minutes
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{out / 'optuna.db'}")
    held = {t.number for t in study.trials if t.state.is_finished()}
    assert held

    with mlflow_server_process(store, artifacts, tmp_path, port=port) as server:
        rerun = _sweep(out, server.uri, trials=1)
        stdout, stderr = rerun.communicate(timeout=600)
        assert rerun.returncode == ExitStatus.OK, stderr[-3000:]
        assert "Optuna held but MLflow lacked" in " ".join(stdout.split())
        client = MlflowClient(server.uri)
        experiment = client.get_experiment_by_name("loadertune")
        assert experiment is not None
        runs = client.search_runs([experiment.experiment_id], max_results=1000)
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{out / 'optuna.db'}")
    from hydra_plugins.loadertune_sweeper._keys import TrialAttr

    # a trial the sampler proposed again is answered from the earlier one's measurement and
    # counted on the parent run, not given a run of its own
    measured = {t.number for t in study.trials
                if t.state.is_finished() and TrialAttr.REPEAT_OF not in t.user_attrs}  # fmt: skip
    children = [r for r in runs if r.data.tags.get("loadertune.kind") == "trial"]
    # One run per measured trial, whatever the server's death cut: a run it left half-written
    # is completed, not closed beside a copy.
    assert sorted(int(r.data.tags["optuna.trial_number"]) for r in children) == sorted(measured)
    assert not any("loadertune.closed" in r.data.tags for r in children)
    recovered = [r for r in children if "loadertune.recovered" in r.data.tags]
    assert recovered
    for run in recovered:
        trial = study.trials[int(run.data.tags["optuna.trial_number"])]
        assert run.data.tags["optuna.state"] == trial.state.name
        if trial.value is not None:
            assert run.data.metrics["time_per_sample_ms"] == pytest.approx(trial.value)
    assert all(r.info.status != "RUNNING" for r in runs)


def test_only_a_server_can_be_lost(tmp_path: Path) -> None:
    """A failed write to a local SQLite store is the disk's or the file's, never a lost
    server (a full disk mid-sweep once ended with 'the MLflow tracking server sqlite:///...
    stopped answering'); a dead port is a lost server."""
    from hydra_plugins.loadertune_sweeper.record._server_loss import server_gone
    from loadertune.record._result_stores import StoreUnavailable, check_tracking_server

    unwritable = tmp_path / "a-file"
    unwritable.write_text("not a folder")  # no folder can be made under it, root or not
    uri = f"sqlite:///{unwritable / 'sub' / 'mlflow.db'}"
    with pytest.raises(StoreUnavailable):
        check_tracking_server(uri)  # the start-up check refuses it...
    assert server_gone(uri) is None  # ...but a write failing there is no server lost
    why = server_gone(f"http://127.0.0.1:{free_port()}")
    assert why is not None and why
