"""A pruned trial was timed beside the same neighbours as a completed one: its record carries
the interference figures too (Optuna's user attrs and the MLflow child run), metered by the
sweep over the steps it ran, here beside a real CPU hog."""

from __future__ import annotations

import subprocess
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests._sweeps import mlflow_runs, study_at, sweep


@pytest.mark.slow
def test_a_pruned_trial_carries_other_cpu_percent(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(storage=storage, study_name="s")
    for step_ms in (1, 2, 200):  # two measured; the 200 ms step is hopeless at its first report
        study.enqueue_trial({"model.step_ms": step_ms})
    hog = subprocess.Popen(["sh", "-c", "exec yes > /dev/null"])  # a neighbour taking a core
    try:
        proc = sweep(
            tmp_path,
            "hydra.sweeper.study_name=s",
            "model=simulated",
            "hydra.sweeper.n_trials=3",
            "hydra.sweeper.params.model.step_ms=choice(1,2,200)",
            "hydra/sweeper/pruner=median",  # the pruned trial is the point, not the rule
            "trial.steps=12",
            "hydra.sweeper.report_every=2",
            "hydra.sweeper.pruner.n_startup_trials=2",
            "hydra.sweeper.pruner.n_warmup_steps=0",
            "hydra.sweeper.busy=warn",
        )
    finally:
        hog.kill()
        hog.wait()
    assert proc.returncode == 0, proc.stderr
    trials = study_at(tmp_path).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2 + [TrialState.PRUNED]
    for trial in trials:
        assert trial.user_attrs["other_cpu_percent"] > 0  # the hog ran throughout
        assert "steal_percent" in trial.user_attrs
    _, children, _ = mlflow_runs(tmp_path)
    (pruned,) = [c for c in children if c.data.tags["optuna.state"] == "PRUNED"]
    assert pruned.data.metrics["other_cpu_percent"] == trials[2].user_attrs["other_cpu_percent"]
    # The steps it managed, named as a complete trial's figures are (record.summary_metrics).
    (complete, *_) = [c for c in children if c.data.tags["optuna.state"] == "COMPLETE"]
    summary = {k for k in complete.data.metrics if k in pruned.data.metrics}
    assert {"time_per_sample_ms", "step_time_ms_p99", "copy_ms_mean", "window_s"} <= summary
    assert "series.compute_ms" in pruned.data.metrics  # its per-step series, all four
