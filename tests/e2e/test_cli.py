"""``loadertune`` end to end in a subprocess: the terminal summary and the MLflow record."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from loadertune.machine._host import cpu_budget
from loadertune.measure._diagnosis import COMPUTE_BOUND, WAIT_LOW, diagnose
from loadertune.measure._precision import MAX_STEPS_FACTOR
from tests._cli import run_cli, tiny_trial
from tests.conftest import with_tiny

pytestmark = pytest.mark.slow

METRICS = {
    "time_per_sample_ms",
    "samples_per_s",
    "step_time_ms_p50",
    "step_time_ms_p90",
    "data_wait_ms_p50",
    "data_wait_fraction",
    "first_batch_s",
    "peak_memory_mb",
    "cpu_percent_mean",
}


def test_trial_is_recorded_in_mlflow(tmp_path: Path) -> None:
    from mlflow import MlflowClient

    # Compute-bound by construction: the step sleeps 50 ms while each of two workers loads
    # a batch of four 40 px JPEGs in a few ms, so the step never waits for data.
    proc = tiny_trial(
        tmp_path, "loader.num_workers=2", "trial.steps=6", "model=simulated", "model.step_ms=50"
    )
    assert proc.returncode == 0, proc.stderr
    assert "time per sample" in proc.stdout
    assert "num_workers=2" in proc.stdout

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("loadertune")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.params["loader.num_workers"] == "2"
    assert run.data.params["dataset.name"] == "synthetic_images"
    assert run.data.metrics.keys() >= METRICS
    tps = run.data.metrics["time_per_sample_ms"]
    # trial.precision decides how many steps past trial.steps are timed; each is recorded.
    metrics = run.data.metrics
    steps = int(metrics["timed_steps"])
    assert 6 <= steps <= MAX_STEPS_FACTOR * 6
    assert metrics["timed_samples"] == 4 * steps
    # Two workers: the rate is taken over the window's whole arrival cycles.
    assert 0 < metrics["cycle_samples"] <= metrics["timed_samples"]
    assert metrics["cycle_window_s"] <= metrics["window_s"]
    assert tps == pytest.approx(metrics["cycle_window_s"] * 1000 / metrics["cycle_samples"])
    for key in ("series.step_time_ms", "series.data_wait_ms"):
        history = client.get_metric_history(run.info.run_id, key)
        assert sorted(m.step for m in history) == list(range(steps))
    tags = run.data.tags
    budget = cpu_budget()
    assert tags["machine.usable_cpus"] == str(budget.count)
    assert tags["machine.usable_cpus_source"] == budget.source
    assert tags["start_method"] == "fork"
    assert tags["device"] == "cpu"
    assert {
        "machine.host",
        "machine.cpu_model",
        "machine.memory_gb",
        "machine.torch",
    } <= tags.keys()
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "trial_result.json", "diagnosis.json"} <= artifacts
    # The label is the diagnosis rules' verdict on the recorded figures. Which label that is
    # depends on the machine (a 50 ms step normally waits ~2% for data: compute-bound; a
    # loaded machine can stall a worker for one step of six), so the test re-derives it.
    recorded = json.loads(
        Path(client.download_artifacts(run.info.run_id, "trial_result.json")).read_text()
    )
    assert tags["bottleneck"] == _relabel(recorded), tags["bottleneck.why"]
    if recorded["summary"]["data_wait_fraction"] < WAIT_LOW:
        assert tags["bottleneck"] == COMPUTE_BOUND
    assert tags["bottleneck.why"]


def _relabel(recorded: dict[str, Any]) -> str:
    """The label :func:`diagnose` gives the figures of a recorded ``trial_result.json``."""
    s = recorded["summary"]
    return diagnose(
        num_workers=recorded["effective_loader"]["num_workers"],
        data_wait_fraction=s["data_wait_fraction"],
        cpu_percent_mean=recorded["cpu_percent_mean"],
        usable_cpus=int(recorded["machine"]["usable_cpus"]),
        copy_ms_mean=s["copy_ms_mean"],
        step_time_ms_p50=s["step_time_ms_p50"],
        peak_memory_mb=recorded["peak_memory_mb"],
        storage=recorded["storage"],
        other_cpu_percent=recorded["other_cpu_percent"],
        steal_percent=recorded["steal_percent"],
        cpu_wait_procs=recorded["cpu_wait_procs"],
    ).label


def test_python_dash_m_and_simulated_model(tmp_path: Path) -> None:
    proc = tiny_trial(
        tmp_path,
        "loader.num_workers=2",
        "model=simulated",
        "model.step_ms=10",
        "tracking.enabled=false",
        module=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert "model=simulated" in proc.stdout
    assert not (tmp_path / "mlflow.db").exists()


def test_custom_dataset_class_from_the_command_line(tmp_path: Path) -> None:
    proc = tiny_trial(
        tmp_path,
        "dataset=custom",
        "dataset._target_=user_data.RandomVectors",
        "+dataset.length=32",
        "+dataset.dim=5",
        "model=mlp",
        "tracking.enabled=false",
    )
    assert proc.returncode == 0, proc.stderr
    assert "dataset=custom" in proc.stdout


def test_mlflow_tracking_uri_from_the_environment_wins(tmp_path: Path) -> None:
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    args = [f"paths.output_root={tmp_path}", *with_tiny(["model=simulated"])]
    proc = run_cli(tmp_path, *args, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "mlflow.db").exists()
    experiment = MlflowClient(tracking_uri=uri).get_experiment_by_name("loadertune")
    assert experiment is not None


def test_bad_input_from_the_console_script_is_one_line_and_status_2(tmp_path: Path) -> None:
    """The console script's mapping of a refusal; every refusal's line is checked in-process
    (tests/checks/test_bad_input.py), each exit status keeps one run like this one."""
    proc = tiny_trial(tmp_path, "loader.prefetch_factor=4")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(
        "loadertune: error: loader.prefetch_factor=4: needs loader.num_workers > 0"
    )
    assert "Fix: " in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "mlflow.db").exists()
    assert not (tmp_path / "datasets").exists()
