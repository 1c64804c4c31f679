"""A fresh SQLite MLflow store made beside the sweep's start: made whole, even through Ctrl-C,
and only when it is a SQLite file not made yet."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sqlite3
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from hydra_plugins.loadertune_sweeper.record._store_ahead import make_store_ahead


def _config(root: Path, uri: str | None = None, enabled: bool = True) -> object:
    return OmegaConf.create(
        {"tracking": {"enabled": enabled, "tracking_uri": uri}, "paths": {"output_root": str(root)}}
    )


def _tables(db: Path) -> set[str]:
    with sqlite3.connect(db) as con:
        return {row[0] for row in con.execute("select name from sqlite_master where type='table'")}


def test_a_fresh_store_is_made_whole_even_through_ctrl_c(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    before = set(mp.active_children())  # an earlier test's processes may still be about
    wait = make_store_ahead(_config(tmp_path))
    (maker,) = set(mp.active_children()) - before
    assert maker.pid is not None
    os.kill(maker.pid, signal.SIGINT)  # as Ctrl-C reaches the whole foreground group
    wait()
    assert maker.exitcode == 0
    assert "mlflow" not in capfd.readouterr().err  # its migrations say nothing on the console
    db = tmp_path / "mlflow.db"
    assert {"experiments", "runs", "metrics", "alembic_version"} <= _tables(db)
    from mlflow import MlflowClient  # the sweep opens it as a made store: no migration left

    assert MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()


def test_nothing_is_started_for_a_made_store_a_server_or_no_tracking(tmp_path: Path) -> None:
    (tmp_path / "mlflow.db").write_bytes(b"")
    before = set(mp.active_children())  # an earlier test's processes may still be about
    for config in (
        _config(tmp_path),  # made before
        _config(tmp_path / "new", uri="http://127.0.0.1:5000"),
        _config(tmp_path / "new", enabled=False),
    ):
        make_store_ahead(config)()
        assert set(mp.active_children()) <= before
    assert not (tmp_path / "new" / "mlflow.db").exists()
