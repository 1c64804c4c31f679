"""Reuse, end to end: a tiny sweep exports ``best.yaml``; ``loadertune loader=best`` measures
those settings in a trial; ``scripts/train.py loader=best`` trains with them, tracked. The
settings reach both loaders (MLflow params equal ``best.yaml``, the built DataLoader's own
attributes included), and the training run's samples/s is logged beside the sweep's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests._cli import SCRIPT, run_cli
from tests.conftest import ROOT, with_tiny

pytestmark = pytest.mark.slow
KEYS = ("batch_size", "num_workers", "prefetch_factor", "persistent_workers", "pin_memory")
STEP = ["model=simulated", "model.step_ms=2"]


def _run(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return run_cli(cwd, command=argv)


def _shown(value: Any) -> str:
    """A setting as MLflow holds a param: its YAML spelling."""
    return (
        "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    )


def _runs(root: Path, experiment: str) -> list[Any]:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    found = client.get_experiment_by_name(experiment)
    assert found is not None, experiment
    return list(client.search_runs([found.experiment_id], max_results=1000))


def test_the_export_reaches_a_trial_and_a_tracked_training_run(tmp_path: Path) -> None:
    tiny = [a for a in with_tiny(STEP) if not a.startswith("loader.batch_size")]
    sweep = _run(
        tmp_path, SCRIPT, "-m", f"paths.output_root={tmp_path}", *with_tiny(STEP),
        "hydra.sweeper.study_name=s", "hydra.sweeper.n_trials=3",
        "loader.num_workers=choice(0,1,2)", "hydra.sweeper.verdict_repeats=1",
    )  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    best = yaml.safe_load((tmp_path / "conf" / "loader" / "best.yaml").read_text())
    (results,) = [p for p in tmp_path.rglob("optimization_results.yaml")
                  if "mlartifacts" not in p.parts]  # fmt: skip
    predicted = float(yaml.safe_load(results.read_text())["recommended"]["samples_per_s"])
    before = {r.info.run_id for r in _runs(tmp_path, "loadertune")}

    trial = _run(tmp_path, SCRIPT, "loader=best", f"paths.output_root={tmp_path}", *tiny)
    assert trial.returncode == 0, trial.stderr[-3000:]
    (measured,) = [r for r in _runs(tmp_path, "loadertune") if r.info.run_id not in before]
    for key in KEYS:
        assert measured.data.params[f"loader.{key}"] == _shown(best[key]), key

    train = _run(
        tmp_path, sys.executable, str(ROOT / "scripts" / "train.py"), "loader=best",
        f"paths.output_root={tmp_path}", *tiny, "+train.epochs=2",
        f"+train.expect_samples_per_s={predicted}",
    )  # fmt: skip
    assert train.returncode == 0, train.stderr[-3000:]
    (run,) = _runs(tmp_path, "loadertune-train")
    params, metrics = run.data.params, run.data.metrics
    for key in KEYS:
        assert params[f"loader.{key}"] == _shown(best[key]), key
    workers = best["num_workers"]
    assert params["built.num_workers"] == str(workers)
    assert params["built.batch_size"] == str(best["batch_size"])
    if workers:  # without workers PyTorch keeps neither
        assert params["built.prefetch_factor"] == _shown(best["prefetch_factor"])
        assert params["built.persistent_workers"] == _shown(best["persistent_workers"])
    assert metrics["predicted_samples_per_s"] == pytest.approx(predicted)
    assert metrics["samples_per_s"] > 0
