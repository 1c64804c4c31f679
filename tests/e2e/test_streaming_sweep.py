"""``loadertune -m`` on streaming datasets, end to end: the workers range capped at the
shards, a verdict's ``best_loader.yaml`` that rebuilds the iterable's loader, and
``scripts/train.py`` training on it."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import optuna
import pytest
import yaml

from tests._cli import run_cli
from tests._sweeps import finished, sweep
from tests.conftest import ROOT

pytestmark = pytest.mark.slow

optuna.logging.set_verbosity(optuna.logging.WARNING)

FAST = ["hydra.sweeper.study_name=s", "model=simulated", "model.step_ms=2", "trial.steps=4"]


def _workers(out: Path) -> list[int]:
    return [int(t.params.get("loader.num_workers", 0)) for t in finished(out)]


def test_a_webdataset_sweep_never_searches_more_workers_than_shards(tmp_path: Path) -> None:
    proc = sweep(
        tmp_path,
        "dataset=webdataset",
        "dataset.count=96",
        "dataset.shards=3",
        "dataset.image_size=16",
        "loader.batch_size=8",
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.params.loader.num_workers=int(interval(0,8))",
        *FAST,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "loader.num_workers searched up to 3" in proc.stdout
    workers = _workers(tmp_path)
    assert len(workers) >= 3 and max(workers) <= 3
    shards = list((tmp_path / "datasets").glob("webdataset-*/*.tar"))
    assert len(shards) == 3  # written once, under the output root


def test_a_custom_iterable_sweep_exports_a_loader_that_trains(tmp_path: Path) -> None:
    data = [
        "dataset=custom",
        "dataset._target_=stream_data.ShardedVectors",
        "+dataset.n_shards=2",
        "+dataset.per_shard=16",
        "loader.batch_size=4",
    ]
    proc = sweep(
        tmp_path,
        *data,
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.verdict_repeats=1",
        "hydra.sweeper.params.loader.num_workers=int(interval(0,4))",
        *FAST,
        verdict=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert max(_workers(tmp_path)) <= 2
    (best,) = tmp_path.glob("multirun/*/*/best_loader.yaml")
    settings = yaml.safe_load(best.read_text())
    assert settings["num_workers"] <= 2

    train = run_cli(
        tmp_path,
        str(ROOT / "scripts" / "train.py"),
        f"paths.output_root={tmp_path}",
        "tracking.enabled=false",
        "loader=best",
        "model=simulated",
        "model.step_ms=2",
        "+train.epochs=2",
        *data,
        timeout=300,
        command=[sys.executable],
    )
    assert train.returncode == 0, train.stderr[-3000:]
    # Two shards of 16: every sample of the pass, once, in each epoch.
    assert re.findall(r"epoch \d: (\d+) samples", train.stdout) == ["32", "32"]


def test_a_stream_slow_to_start_is_judged_by_the_start_up_limit(tmp_path: Path) -> None:
    """A stream whose first item takes longer than the stall limit completes, once started,
    under ``hydra.sweeper.startup_timeout_s``; one that never yields is stopped at that limit,
    the error naming the key to raise."""
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'optuna.db'}", study_name="s")
    for first_item_s in (5.0, 3600.0):  # past the 4 s stall limit; a stream that never opens
        study.enqueue_trial({"+dataset.first_item_s": first_item_s})
    proc = sweep(
        tmp_path,
        "dataset=custom",
        "dataset._target_=stream_data.SlowStart",
        "+dataset.first_item_s=choice(5.0,3600.0)",
        "+dataset.n_shards=2",
        "+dataset.per_shard=256",  # no pass ends inside a trial: one opening each
        "loader.batch_size=4",
        "loader.num_workers=1",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.pruner=none",
        "hydra.sweeper.stall_timeout_s=4",
        # Far past the slow trial's start (two openings of 5 s: the pre-flight's read of the
        # first items, then the worker's, plus the start of a process on a loaded machine).
        "hydra.sweeper.startup_timeout_s=30",
        *FAST,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    slow, never = finished(tmp_path)
    assert slow.params["+dataset.first_item_s"] == 5.0
    assert slow.state == optuna.trial.TrialState.COMPLETE, slow.user_attrs.get("error")
    assert never.state == optuna.trial.TrialState.FAIL
    assert never.user_attrs["reason"] == "timeout"
    error = never.user_attrs["error"]
    assert "start-up limit (30 s, hydra.sweeper.startup_timeout_s; no step yet" in error
    assert error.endswith("raise hydra.sweeper.startup_timeout_s")
