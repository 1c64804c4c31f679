"""One tiny finished sweep with a verdict and a repeat, shared by the review-surface tests.

Run once per test session (cached here), in a working directory of its own apart from the
output root, so a test can list what the sweep left in the working directory.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from omegaconf import OmegaConf

from tests._cli import run_cli, sweep_args

OVERRIDES = [
    "hydra.sweeper.study_name=s",
    "model=simulated",
    "model.step_ms=2",
    "hydra.sweeper.n_trials=3",
    "hydra.sweeper.params.loader.num_workers=int(interval(0,2))",
    "hydra.sweeper.verdict_repeats=1",
    "hydra.sweeper.verdict_top=2",
]


@dataclass
class ReviewedSweep:
    """Where the sweep wrote, what it printed, and its study."""

    out: Path  # paths.output_root
    cwd: Path  # the working directory it ran in
    proc: subprocess.CompletedProcess[str]
    study: optuna.Study
    results: dict[str, Any]  # optimization_results.yaml

    @property
    def store(self) -> str:
        return f"sqlite:///{self.out / 'mlflow.db'}"


_done: dict[Path, ReviewedSweep] = {}


def reviewed_sweep(root: Path) -> ReviewedSweep:
    """Run (once) a 3-trial sweep whose first two trials are one setting (the second a
    repeat) and whose verdict measures the top two again; under ``root``."""
    if root in _done:
        return _done[root]
    out, cwd = root / "out", root / "cwd"
    out.mkdir(parents=True)
    cwd.mkdir()
    storage = f"sqlite:///{out / 'optuna.db'}"
    study = optuna.create_study(storage=storage, study_name="s")
    study.enqueue_trial({"loader.num_workers": 0, "loader.prefetch_factor": 4})
    study.enqueue_trial({"loader.num_workers": 0, "loader.prefetch_factor": 8})  # a repeat
    proc = run_cli(cwd, *sweep_args(out, *OVERRIDES))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (sweep_dir,) = (out / "multirun").glob("*/*")
    data = OmegaConf.to_container(OmegaConf.load(sweep_dir / "optimization_results.yaml"))
    assert isinstance(data, dict)
    study = optuna.load_study(study_name="s", storage=storage)
    _done[root] = ReviewedSweep(out, cwd, proc, study, {str(k): v for k, v in data.items()})
    return _done[root]
