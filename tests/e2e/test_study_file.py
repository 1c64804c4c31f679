"""The study's store lost mid-sweep (``study/_study_file.py``): a sweep never claims a study
it lost.

Real SQLite files: one deleted (checked again, as the sweep's error handler does, or left
empty by a new connection) or replaced while a connection holds it open, one overwritten
in place; and real sweeps whose ``optuna.db`` is deleted, or corrupted, after their first
trial. Each ends with exit status 5 in one line, its parent run FAILED, no results file, and
the trials that ended kept.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sqlite3
from pathlib import Path

import optuna
import pytest
import sqlalchemy.exc
from mlflow.exceptions import MlflowException
from optuna.trial import TrialState

from hydra_plugins.loadertune_sweeper.study._study_file import StudyFile, StudyLost, store_failure
from loadertune.errors import ExitStatus
from loadertune.record._failures import Reason
from tests._processes import processes_under
from tests._sweeps import SLOW, faulty_sweep, mlflow_runs, running_trial, wait_for


def _db(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE trials (number INTEGER)")
    con.executemany("INSERT INTO trials VALUES (?)", [(0,), (1,)])
    con.commit()
    return con


def _numbers(path: Path) -> list[int]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as con:
        return [n for (n,) in con.execute("SELECT number FROM trials ORDER BY number")]


def test_a_server_or_memory_study_is_not_watched(tmp_path: Path) -> None:
    for url in ("postgresql://u@h/db", "sqlite:///:memory:", "sqlite:///"):
        watched = StudyFile.of(url)
        assert watched.path is None
        watched.check()  # nothing to watch: never raises


def test_an_untouched_file_passes(tmp_path: Path) -> None:
    con = _db(tmp_path / "optuna.db")
    watched = StudyFile.of(f"sqlite:///{tmp_path / 'optuna.db'}")
    con.execute("INSERT INTO trials VALUES (2)")
    con.commit()
    watched.check()  # written through, same file: still the study's


def test_a_deleted_file_is_restored_from_the_open_connection(tmp_path: Path) -> None:
    path = tmp_path / "optuna.db"
    con = _db(path)
    watched = StudyFile.of(f"sqlite:///{path}")
    path.unlink()
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        con.execute("INSERT INTO trials VALUES (2)")  # SQLite refuses a deleted file's writes
    with pytest.raises(StudyLost) as raised:
        watched.check()
    said = str(raised.value)
    assert said.startswith(f"hydra.sweeper.storage=sqlite:///{path}: the study's file was deleted")
    assert f"restored to {path}" in said and "Fix: keep the file" in said
    assert "\n" not in said
    assert _numbers(path) == [0, 1]  # every committed row
    con.close()


def _optuna_study_deleted(path: Path) -> tuple[StudyFile, sqlite3.Connection]:
    """A study made by Optuna at ``path`` with two completed trials, watched and held open as
    a sweep holds it, then deleted with ``os.remove``; (the watcher, the open connection)."""
    url = f"sqlite:///{path}"
    study = optuna.create_study(study_name="s", storage=url)
    for value in (1.0, 2.0):
        study.tell(study.ask(), value)
    held = sqlite3.connect(path)  # the sweep's open connection
    watched = StudyFile.of(url)
    os.remove(path)
    return watched, held


def _values(path: Path) -> list[float | None]:
    return [t.value for t in optuna.load_study(study_name="s", storage=f"sqlite:///{path}").trials]


def test_a_deleted_file_is_said_deleted_on_every_check_and_nothing_is_copied_aside(
    tmp_path: Path,
) -> None:
    """The sweep checks after a trial, and its error handler checks again: the second check
    finds the restored file (another inode) at the path, and must not take it for a
    replacement and copy the same trials beside it."""
    path = tmp_path / "optuna.db"
    watched, held = _optuna_study_deleted(path)
    said = []
    for _ in range(2):  # the check after the trial, then the error handler's
        with pytest.raises(StudyLost) as raised:
            watched.check()
        said.append(str(raised.value))
    assert "the study's file was deleted during the sweep: restored to" in said[1], said[1]
    assert said[0] == said[1] and "\n" not in said[1]
    assert not (tmp_path / "optuna.db.replaced-study").exists()
    assert _values(path) == [1.0, 2.0]  # every trial recorded before the delete, at its path
    held.close()


def test_a_deleted_file_an_empty_one_took_the_place_of_is_restored(tmp_path: Path) -> None:
    """A connection opened on the path after the delete makes an empty file there: the study
    is gone, not replaced, so it is restored over that empty file."""
    path = tmp_path / "optuna.db"
    watched, held = _optuna_study_deleted(path)
    sqlite3.connect(path).close()  # SQLite creates the missing file, empty
    assert path.stat().st_size == 0
    with pytest.raises(StudyLost, match="was deleted during the sweep: restored to"):
        watched.check()
    assert not (tmp_path / "optuna.db.replaced-study").exists()
    assert _values(path) == [1.0, 2.0]
    held.close()


def test_a_restored_study_fails_the_trials_its_sweep_left_running(tmp_path: Path) -> None:
    """A trial asked for just before the delete carries no owner yet: the stopping sweep fails
    it in the restored file, so the next start neither waits for it nor keeps it RUNNING."""
    path = tmp_path / "optuna.db"
    url = f"sqlite:///{path}"
    study = optuna.create_study(study_name="s", storage=url)
    study.tell(study.ask(), 1.0)
    study.ask()  # asked, not claimed: the sweep stopped before its owner was written
    held = sqlite3.connect(path)  # the sweep's open connection
    watched = StudyFile.of(url)
    path.unlink()
    with pytest.raises(StudyLost, match="restored to"):
        watched.check()
    restored = optuna.load_study(study_name="s", storage=url).trials
    assert [t.state for t in restored] == [TrialState.COMPLETE, TrialState.FAIL]
    assert restored[1].user_attrs["reason"] == Reason.INTERRUPTED
    held.close()


def test_a_replaced_file_is_kept_and_the_study_copied_aside(tmp_path: Path) -> None:
    path = tmp_path / "optuna.db"
    con = _db(path)
    watched = StudyFile.of(f"sqlite:///{path}")
    path.rename(tmp_path / "moved.db")
    other = sqlite3.connect(path)
    other.execute("CREATE TABLE trials (number INTEGER)")
    other.commit()
    other.close()
    with pytest.raises(StudyLost) as raised:
        watched.check()
    aside = tmp_path / "optuna.db.replaced-study"
    assert f"copied to {aside}" in str(raised.value)
    assert _numbers(aside) == [0, 1]
    assert _numbers(path) == []  # what the user put there is left alone
    con.close()


def _chain(*errors: BaseException) -> BaseException:
    """``errors[0]`` raised from ``errors[1]``, raised from ... (Python's ``__cause__``)."""
    for outer, inner in itertools.pairwise(errors):
        outer.__cause__ = inner
    return errors[0]


def test_a_failed_study_database_is_one_line_naming_the_key() -> None:
    driver = sqlite3.DatabaseError("file is not a database\nmore")
    wrapped = sqlalchemy.exc.DatabaseError("SELECT", {}, driver)
    line = store_failure("sqlite:////x/optuna.db", _chain(RuntimeError("tell"), wrapped, driver))
    assert line is not None
    assert line.startswith("hydra.sweeper.storage=sqlite:////x/optuna.db: the study's database")
    assert "(file is not a database)" in line and "Fix: " in line and "\n" not in line


def test_other_errors_are_not_the_studys() -> None:
    assert store_failure("sqlite:////x/o.db", ValueError("a bug of the sweep's own")) is None
    mlflow_store = _chain(
        MlflowException("cannot log"), sqlalchemy.exc.OperationalError("INSERT", {}, Exception())
    )
    assert store_failure("sqlite:////x/o.db", mlflow_store) is None  # MLflow's store, not Optuna's


def _loses_its_study(out: Path, damage: str) -> tuple[int, str]:
    """A sweep whose optuna.db is damaged once its first trial completed; (status, stderr)."""
    proc = faulty_sweep(out, "hydra.sweeper.n_trials=3", *SLOW, wait=False)
    wait_for(lambda: running_trial(out, after_complete=1) or proc.poll() is not None)
    db = out / "optuna.db"
    if damage == "deleted":
        db.unlink()
    else:  # overwritten in place, as a stray write or a failing disk would
        with db.open("r+b") as f:
            f.write(b"\x00not a database\x00" * 4096)
    _, err = proc.communicate(timeout=600)
    wait_for(lambda: not processes_under(out), timeout=120)
    return int(proc.returncode), err


@pytest.mark.slow
def test_a_sweep_whose_study_file_is_deleted_stops_restores_it_and_resumes(
    tmp_path: Path,
) -> None:
    status, err = _loses_its_study(tmp_path, "deleted")
    assert status == ExitStatus.INFRASTRUCTURE, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert "the study's file was deleted during the sweep: restored to" in last, err[-3000:]
    assert "Traceback" not in err
    assert not (tmp_path / "optuna.db.replaced-study").exists()  # nothing was replaced
    parents, children, _ = mlflow_runs(tmp_path)
    assert [p.info.status for p in parents] == ["FAILED"]
    assert all(c.info.status != "RUNNING" for c in children)
    assert not list(tmp_path.rglob("optimization_results.yaml"))
    kept = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    assert not [t for t in kept.trials if t.state == TrialState.RUNNING]  # its own: failed
    measured = [
        t
        for t in kept.trials
        if t.state.is_finished() and t.user_attrs.get("reason") != Reason.INTERRUPTED
    ]
    assert len(measured) >= 1
    assert len(children) == len([t for t in measured if "repeat_of" not in t.user_attrs])

    again = faulty_sweep(tmp_path, "hydra.sweeper.n_trials=1", *SLOW)
    _, err = again.communicate()
    assert again.returncode == ExitStatus.OK, err[-3000:]
    resumed = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    before = {t.number: t.value for t in measured}
    assert {t.number: t.value for t in resumed.trials if t.number in before} == before
    assert not [t for t in resumed.trials if t.state.name == "RUNNING"]
    assert list(tmp_path.rglob("optimization_results.yaml"))  # the rerun's, whole


@pytest.mark.slow
def test_a_sweep_whose_study_file_is_corrupted_fails_in_one_line(tmp_path: Path) -> None:
    status, err = _loses_its_study(tmp_path, "corrupted")
    assert status == ExitStatus.INFRASTRUCTURE, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("loadertune: error: hydra.sweeper.storage=sqlite:///"), err[-3000:]
    assert "the study's database failed during the sweep" in last
    assert "Traceback" not in err
    parents, children, _ = mlflow_runs(tmp_path)
    assert [p.info.status for p in parents] == ["FAILED"]
    assert all(c.info.status != "RUNNING" for c in children)
    assert not list(tmp_path.rglob("optimization_results.yaml"))
