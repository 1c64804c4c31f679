"""A fresh SQLite MLflow store opened by several processes at the same moment (two sweeps, a
single trial, AutoLoader): its tables are made once, every opener succeeds, the store works.

The openers start from a fork server that has imported MLflow and nothing else, as separate
commands start: forked from this test process they would inherit the engines, event
listeners and threads of every test this process ran before (a ``KeyError`` on an object's
id came once that way), which no opener of a real store carries.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import sqlite3
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from hydra_plugins.loadertune_sweeper.record._store_ahead import make_store_ahead
from loadertune.config._typed import TrackingConfig
from loadertune.record._mlflow_store import sqlite_file
from loadertune.record._result_stores import bounded_tracking_retries
from loadertune.record._tracking import use_experiment

OPENERS = 4  # processes released together onto one fresh store
WAIT_S = 600.0  # far past what a loaded machine takes to migrate a store once
PRELOAD = ["mlflow", "mlflow.store.tracking.sqlalchemy_store", "loadertune.record._tracking"]


def _single_trial_or_sweep(root: Path, uri: str) -> None:
    """Where a single trial and a sweep's recorder first open the store."""
    use_experiment(TrackingConfig(tracking_uri=uri), str(root))


def _sweep_start(root: Path, uri: str) -> None:
    """A sweep's start: the store made in a process of its own, then opened."""
    config = OmegaConf.create(
        {"tracking": {"enabled": True, "tracking_uri": uri}, "paths": {"output_root": str(root)}}
    )
    make_store_ahead(config)()
    use_experiment(TrackingConfig(tracking_uri=uri), str(root))


def _autoloader(root: Path, uri: str) -> None:
    """AutoLoader's record: a bare ``MlflowClient()`` on MLflow's tracking URI."""
    from mlflow import MlflowClient

    os.environ["MLFLOW_TRACKING_URI"] = uri
    with bounded_tracking_retries():
        MlflowClient().search_experiments(max_results=1)


def _open(
    how: Callable[[Path, str], None], root: Path, uri: str, start: Any, out: Any, i: int
) -> None:
    start.wait()
    try:
        how(root, uri)
        out.put((i, "ok"))
    except BaseException:
        out.put((i, traceback.format_exc()[-2000:]))  # where it failed, should it ever


def _tables(db: Path) -> set[str]:
    with sqlite3.connect(db) as con:
        return {row[0] for row in con.execute("select name from sqlite_master where type='table'")}


def test_openers_at_once_make_the_tables_once_and_all_succeed(tmp_path: Path) -> None:
    import mlflow

    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    ways = [_single_trial_or_sweep, _sweep_start, _autoloader, _single_trial_or_sweep]
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)  # imported before the fork: they meet at the migration
    start, out = ctx.Barrier(OPENERS), ctx.Queue()
    procs = [
        ctx.Process(target=_open, args=(ways[i % len(ways)], tmp_path, uri, start, out, i))
        for i in range(OPENERS)
    ]
    for p in procs:
        p.start()
    try:
        said = dict(out.get(timeout=WAIT_S) for _ in procs)
    except queue.Empty:
        pytest.fail("an opener neither succeeded nor failed")
    finally:
        for p in procs:
            p.join(WAIT_S)
    assert {i: s for i, s in said.items() if s != "ok"} == {}
    assert {"experiments", "runs", "latest_metrics", "alembic_version"} <= _tables(db)
    client = mlflow.MlflowClient(uri)  # the store works: a run written and read back
    experiment = client.get_experiment_by_name("Default") or client.search_experiments()[0]
    run = client.create_run(experiment.experiment_id)
    client.log_metric(run.info.run_id, "m", 1.0)
    assert client.get_run(run.info.run_id).data.metrics == {"m": 1.0}
    assert (tmp_path / "mlflow.db.lock").exists()  # the lock lives beside the database


@pytest.mark.parametrize(
    ("uri", "file"),
    [
        ("sqlite:////a/b/mlflow.db", "/a/b/mlflow.db"),
        ("sqlite:///rel/mlflow.db?timeout=30", "rel/mlflow.db"),
        ("sqlite:///:memory:", None),
        ("sqlite://", None),
        ("http://127.0.0.1:5000", None),
        ("postgresql://u@h/db", None),
    ],
)
def test_which_uris_are_a_sqlite_file(uri: str, file: str | None) -> None:
    assert sqlite_file(uri) == file
