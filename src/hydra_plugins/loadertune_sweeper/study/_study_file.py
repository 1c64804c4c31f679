"""The study's store, watched while the sweep runs: a sweep never claims a study it lost.

An SQLite study deleted mid-sweep still reads for the sweep (its connection holds the deleted
file open) while SQLite refuses its writes, and the file vanishes with the sweep. So after
every trial, and when a write of the study fails, :class:`StudyFile` asks whether the path
still holds the file the study was opened on. A deleted file (gone, or an empty one that a
connection opened after the delete made there) is restored from the one this process still
holds open (every trial recorded before the delete; the trial it was running, or had asked
for and not yet claimed, failed there as interrupted so the next start runs it again); a
replaced one (another file now at the path) is left alone and the study copied beside it.
Once lost, every later check says the same line, so the file restored at the path is never
taken for a replacement. A study whose database fails outright (a file overwritten in place,
a server that refuses) raises SQLAlchemy's or Optuna's errors, which :func:`store_failure`
turns into one line. Either ends the sweep with exit status 5, its parent run FAILED and no
results file.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import optuna
import sqlalchemy.exc

from loadertune._lazy import mlflow_exceptions
from loadertune.record import StoreUnavailable

from ._storage import fail_orphaned_trials

PREFIX = "sqlite:///"


class StudyLost(StoreUnavailable):
    """The study's SQLite file was deleted or replaced during the sweep."""


@dataclass
class StudyFile:
    """The SQLite file at ``path`` as the study was opened on it (device, inode).

    ``lost`` keeps the line said once the file was found deleted or replaced, and every later
    check raises it again: the sweep's connection still holds the lost file. Looking at the
    path afresh would find the file restored there (another inode) and take it for a
    replacement, copying the same trials beside it.
    """

    path: Path | None
    ident: tuple[int, int] | None
    lost: str | None = None

    @classmethod
    def of(cls, url: str) -> StudyFile:
        """The file behind an ``sqlite:///`` URL (none for a database server or memory)."""
        if not url.startswith(PREFIX) or url[len(PREFIX) :] in ("", ":memory:"):
            return cls(None, None)
        path = Path(url[len(PREFIX) :])
        return cls(path, _ident(path))

    def check(self) -> None:
        """Raise :class:`StudyLost` once the path no longer holds the study's file."""
        if self.lost is not None:
            raise StudyLost(self.lost)
        if self.path is None or self.ident is None:
            return
        now = _ident(self.path)
        if now == self.ident:
            return
        gone = now is None or _is_empty(self.path)
        what = (_restore if gone else _copy_aside)(self.path, self.ident)
        self.lost = (
            f"hydra.sweeper.storage={PREFIX}{self.path}: the study's file was {what}. The sweep "
            "stops here so no trial is recorded where it will be lost. Fix: keep the file while "
            "a sweep runs, then run the same command again (the study resumes)"
        )
        raise StudyLost(self.lost)


def store_failure(url: str, exc: BaseException) -> str | None:
    """One line for an error of the study's database (None: not one); what names it and the
    fix. Walks the chain: Optuna wraps SQLAlchemy's error, which wraps the driver's."""
    kinds = (sqlalchemy.exc.SQLAlchemyError, sqlite3.Error, optuna.exceptions.StorageInternalError)
    seen: BaseException | None = exc
    inner: BaseException | None = None
    while seen is not None:
        if isinstance(seen, mlflow_exceptions.MlflowException):
            return None  # MLflow's own store (also SQLAlchemy's), not the study's
        if isinstance(seen, kinds):
            inner = seen
        seen = seen.__cause__ or seen.__context__
    if inner is None:
        return None
    orig = getattr(inner, "orig", None) or inner
    line = (str(orig).strip().splitlines() or [type(orig).__name__])[0]
    return (
        f"hydra.sweeper.storage={url}: the study's database failed during the sweep ({line}); "
        "the sweep stops, its MLflow runs kept. Fix: repair or restore the database, then run "
        "the same command (the study resumes); an SQLite file past repair: move it aside, and "
        "the same command starts a new study"
    )


def _release_trials(url: str) -> None:
    """Fail, as interrupted, the trials the restored study at ``url`` holds RUNNING with no
    live owner, claimed or not: its sweep stops here, so none of them will end (a trial asked
    for just before the delete may not carry its owner yet, and the next start would wait a
    minute for it). A store that refuses leaves them to the next start's own check."""
    with contextlib.suppress(sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.OptunaError):
        for name in optuna.get_all_study_names(url):
            fail_orphaned_trials(optuna.load_study(study_name=name, storage=url), unclaimed_s=0)


def _restore(path: Path, ident: tuple[int, int]) -> str:
    """Put the deleted file ``ident`` back at ``path`` (over an empty one a connection opened
    after the delete made there: it holds nothing); what happened, for the line."""
    if not _copy_open_file(ident, path):
        return "deleted during the sweep, and could not be restored"
    _release_trials(f"{PREFIX}{path}")
    return (
        f"deleted during the sweep: restored to {path} from the sweep's open connection, "
        "with every trial recorded before the delete"
    )


def _copy_aside(path: Path, ident: tuple[int, int]) -> str:
    """Copy the study ``ident`` beside the other file now at ``path``, which is left alone;
    what happened, for the line."""
    aside = path.with_name(f"{path.name}.replaced-study")
    saved = _copy_open_file(ident, aside)
    return "replaced by another file during the sweep" + (
        f": the sweep's study, with every trial recorded before, is copied to {aside}"
        if saved
        else ""
    )


def _is_empty(path: Path) -> bool:
    """Whether ``path`` holds an empty file: what SQLite makes when a connection opens a
    deleted database's path, so the study's file is gone, not replaced."""
    try:
        return path.stat().st_size == 0
    except OSError:
        return True


def _ident(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _copy_open_file(ident: tuple[int, int], target: Path) -> bool:
    """Copy the file ``ident`` that this process still holds open to ``target``, whole or not
    at all, and only if SQLite finds it sound. Read through ``/proc/self/fd`` (the kernel
    opens a deleted file there; SQLite itself would follow the link to the missing path).
    The copy is taken between trials, with no transaction open: the file is consistent."""
    fds = Path(f"/proc/{os.getpid()}/fd")
    part = target.with_name(f".{target.name}.part")
    with contextlib.suppress(OSError):
        for fd in fds.iterdir():
            with contextlib.suppress(OSError, sqlite3.Error):
                if _ident(fd) != ident:
                    continue
                with fd.open("rb") as source, part.open("wb") as copy:
                    shutil.copyfileobj(source, copy)
                with contextlib.closing(sqlite3.connect(part)) as check:
                    if check.execute("PRAGMA quick_check").fetchone() != ("ok",):
                        continue
                os.replace(part, target)
                return True
    part.unlink(missing_ok=True)
    return False
