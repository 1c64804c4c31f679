"""A fresh MLflow store made in a process of its own while the sweep starts.

A new SQLite store runs MLflow's schema migrations (about 3.5 s on a 2-core machine) before
the first run can be written, and the sweep's own start (torch's import and the first
composition, Optuna's storage, MLflow's import: about as long) keeps one core busy. So the
store is made beside it, and the sweep waits for it only where it first opens the store.
It is opened as every path opens a store (``loadertune.record._mlflow_store``: under the lock beside
the file, so another sweep, a single trial or AutoLoader opening it at the same moment waits
for the tables). Only a SQLite file that does not exist yet; a server, or a store made
before, is opened as it always was. The maker ignores Ctrl-C, so an interrupted start never
leaves a store half-migrated (multiprocessing joins it at exit).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadertune.config import TrackingConfig
from loadertune.record import open_store, sqlite_file, tracking_uri

from ._console import quiet_libraries


def make_store_ahead(config: Any) -> Callable[[], None]:
    """Start making the store a sweep's composed ``config`` names, when it is a SQLite file
    not made yet; return what waits for it (a no-op otherwise). Nothing is raised here: a
    store that cannot be made fails where the sweep opens it, with its usual message."""
    uri = _new_sqlite_store(config)
    if uri is None:
        return lambda: None
    proc = mp.get_context("fork").Process(target=_make, args=(uri,), daemon=False)
    main = threading.current_thread() is threading.main_thread()
    before = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:  # forked ignoring Ctrl-C from its first instruction
        proc.start()
    finally:
        if main:
            signal.signal(signal.SIGINT, before)
    return proc.join


def _new_sqlite_store(config: Any) -> str | None:
    """The store's URI when tracking is on and it is a SQLite file that does not exist."""
    try:
        tracking = config.tracking
        if not bool(tracking.enabled):
            return None
        given = TrackingConfig(tracking_uri=tracking.get("tracking_uri"))
        uri = tracking_uri(given, str(config.paths.output_root))
    except Exception:  # a config the checks will reject, with their message
        return None
    db = sqlite_file(uri)
    return None if db is None or Path(db).exists() else uri


def _make(uri: str) -> None:
    """Create the store's tables (MLflow's migrations) and exit; never raises."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # also when forked off the main thread
    code = 0
    try:
        quiet_libraries()  # the console stays the sweep's: no migration lines from here
        open_store(uri)  # makes the tables, under the lock every opener of the store takes
    except Exception:
        code = 1
    os._exit(code)
