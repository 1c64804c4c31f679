"""A small sweep end to end: each setting measured once, one MLflow child run per measurement.

``loadertune -m`` in a subprocess against real SQLite stores (Optuna and MLflow) and real
trial processes; nothing here depends on how fast the machine is.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tests._sweeps import NAMED, mlflow_runs, study_at, sweep

pytestmark = pytest.mark.slow


def test_a_small_space_is_measured_once_per_setting_and_recorded_once(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(storage=storage, study_name="s")
    # Two proposals of one setting (0 workers, whatever the prefetch factor) queued first.
    study.enqueue_trial({"loader.num_workers": 0, "loader.prefetch_factor": 1})
    study.enqueue_trial({"loader.num_workers": 0, "loader.prefetch_factor": 2})
    proc = sweep(
        tmp_path,
        *NAMED,
        "hydra.sweeper.n_trials=8",
        "hydra.sweeper.guess_range=false",
        "hydra.sweeper.params.loader.num_workers=int(interval(0,1))",
        "hydra.sweeper.params.loader.prefetch_factor=choice(1,2)",
    )
    assert proc.returncode == 0, proc.stderr
    trials = [t for t in study_at(tmp_path).trials if t.state.is_finished()]
    measured = [t for t in trials if "repeat_of" not in t.user_attrs]
    settings = {tuple(sorted(t.params.items())) for t in measured}
    # Three settings (0 workers; 1 worker with prefetch 1 or 2), each measured once, and the
    # search ends there, with trials of its budget left.
    assert len(settings) == len(measured) == 3, [t.params for t in measured]
    assert "every setting of the search space has an answer" in proc.stdout
    assert any("repeat_of" in t.user_attrs for t in trials)
    parents, children, _ = mlflow_runs(tmp_path)
    assert len(children) == len(measured)
    assert parents[0].data.metrics["repeats_answered"] == len(trials) - len(measured)
