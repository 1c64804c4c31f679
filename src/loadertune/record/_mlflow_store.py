"""An MLflow store opened in this process; a SQLite one set up once, under a lock beside it.

MLflow makes a SQLite store's tables (its Alembic migrations, seconds) in whichever process
first opens the file, and nothing stops a second process doing the same at that moment: two
sweeps started together on a fresh store (or a sweep and a single trial, or AutoLoader) both
migrate it and one fails (``table _alembic_tmp_latest_metrics already exists``, ``duplicate
column name``, a revision it cannot find). So every path of ours that may first open a store
opens it here: a SQLite file while holding an exclusive ``flock`` on ``<file>.lock``, so one
process makes the tables and the others wait for them and find them made. MLflow keeps the
store it built for the rest of the process, so the clients made afterwards reuse it. A
server makes its own store's tables; a database server is the user's to set up.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from loadertune._lazy import mlflow

SQLITE = "sqlite:///"
LOCK_SUFFIX = ".lock"  # the lock file beside the database: <file>.lock


def open_store(uri: str) -> None:
    """Open MLflow's store for ``uri`` in this process, its tables made if the store is new;
    a SQLite file only while this process holds its lock. MLflow's errors pass through."""
    db = sqlite_file(uri)
    if db is None:
        return
    with _held(Path(f"{db}{LOCK_SUFFIX}")):
        mlflow.MlflowClient(tracking_uri=uri)  # builds (and caches) the store: its migrations


def sqlite_file(uri: str) -> str | None:
    """The file a ``sqlite:///`` URI names (its query string dropped); None for any other
    URI and for an in-memory database, which no other process can open."""
    if not uri.startswith(SQLITE):
        return None
    path = uri[len(SQLITE) :].partition("?")[0]
    return None if path in ("", ":memory:") else path


@contextlib.contextmanager
def _held(lock: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``lock`` for the body; the kernel drops it if this process
    dies. Without a writable folder there is no lock: MLflow then says what it cannot write."""
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError:
        fd = -1
    try:
        if fd >= 0:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        if fd >= 0:
            os.close(fd)  # closing the file releases the lock
