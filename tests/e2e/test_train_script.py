"""scripts/train.py: a real training loop on the loader settings, logged as an MLflow run."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests._cli import run_cli
from tests.conftest import ROOT, with_tiny

pytestmark = pytest.mark.slow


def test_train_script_trains_logs_and_compares_with_the_prediction(tmp_path: Path) -> None:
    overrides = with_tiny(
        [
            "model=simulated",
            "model.step_ms=2",
            "loader.num_workers=2",
            "+train.epochs=2",
            "+train.expect_samples_per_s=1000",
        ]
    )
    train = [str(ROOT / "scripts" / "train.py"), f"paths.output_root={tmp_path}", *overrides]
    proc = run_cli(tmp_path, *train, timeout=300, command=[sys.executable])
    assert proc.returncode == 0, proc.stderr
    # 48 images in batches of 4: 12 batches an epoch, all of them trained on.
    assert proc.stdout.count("epoch ") == 2
    assert "epoch 1: 48 samples" in proc.stdout
    match = re.search(r"measured/predicted = ([0-9.]+) \((within|outside) 10%\)", proc.stdout)
    assert match is not None, proc.stdout

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("loadertune-train")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    metrics = run.data.metrics
    assert run.data.params["loader.num_workers"] == "2"
    assert metrics["samples_per_s"] > 0 and metrics["end_to_end_samples_per_s"] > 0
    assert float(match.group(1)) == pytest.approx(metrics["samples_per_s"] / 1000, abs=0.006)
    history = client.get_metric_history(run.info.run_id, "epoch_samples_per_s")
    assert [m.step for m in history] == [0, 1]
    # Artifacts beside the store, nothing in the working directory's ./mlruns.
    assert experiment.artifact_location.endswith("mlartifacts")
    assert not (tmp_path / "mlruns").exists()
