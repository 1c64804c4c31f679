"""One timing process per host: a lock that a second sweep or trial waits on or is refused by.

Two sweeps timing on one machine disturb each other's measurements (and both verdicts then
compare noise), so a sweep, and a single trial started on its own, hold an exclusive
``flock`` on a file in ``$LOADERTUNE_LOCK_DIR`` (default: ``<tmp>/loadertune-<uid>``) for as
long as they time anything. The kernel drops the lock when its process dies, however it
dies, so a killed sweep never leaves a stale lock behind. The holder writes who it is beside
the lock, so a refused or waiting process names it in one line. A sweep's own trial
processes run under their sweep's lock and take none.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import IO

from loadertune.errors import ConfigError, ExitStatus
from loadertune.record import StoreUnavailable, write_text_atomically

MODES = ("wait", "refuse", "off")
ENV_DIR = "LOADERTUNE_LOCK_DIR"
POLL_S = 1.0


class HostBusy(Exception):
    """Another timing process holds this host's lock (``refuse``)."""

    exit_status = ExitStatus.BUSY


@dataclass(frozen=True)
class Holder:
    """Who holds the lock: enough to find the process and tell what it is doing."""

    pid: int
    host: str
    what: str
    since: str

    def describe(self) -> str:
        return f"{self.what} (pid {self.pid} on {self.host}, since {self.since})"


def lock_dir() -> Path:
    """Where the lock lives: ``$LOADERTUNE_LOCK_DIR``, else a per-user folder in tmp."""
    env = os.environ.get(ENV_DIR)
    return Path(env) if env else Path(tempfile.gettempdir()) / f"loadertune-{os.getuid()}"


def check_lock_dir(directory: Path | None = None) -> None:
    """Raise :class:`StoreUnavailable` if the lock's folder cannot hold the lock (a file in
    its place, a read-only disk): called before a sweep opens its study, so nothing is left."""
    folder = directory or lock_dir()
    _open_lock(folder).close()


def _open_lock(folder: Path) -> IO[str]:
    """The lock file in ``folder``, opened for ``flock``; one line naming the fix if not."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        return open(folder / "timing.lock", "a+")
    except OSError as exc:
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        if exc.errno == errno.EEXIST:
            why = "it is a file, not a folder"
        raise StoreUnavailable(
            f"{ENV_DIR}={folder}: the host's timing lock cannot be kept there ({why}). Fix: "
            f"point {ENV_DIR} at a writable folder, or unset it for the per-user folder in tmp"
        ) from None


def check_mode(key: str, mode: str) -> None:
    """Refuse a lock mode that is not one of :data:`MODES`, naming the key."""
    if mode not in MODES:
        raise ConfigError(
            key, mode, "is not a host lock mode", f"use one of {', '.join(MODES)} (default wait)"
        )


def read_holder(directory: Path | None = None) -> Holder | None:
    """The current holder as it wrote itself down, or None if unknown."""
    path = (directory or lock_dir()) / "holder.json"
    try:
        return Holder(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


@contextlib.contextmanager
def timing_lock(
    what: str,
    mode: str = "wait",
    say: Callable[[str], None] | None = None,
    directory: Path | None = None,
) -> Iterator[None]:
    """Hold the host's timing lock for the ``with`` block.

    Args:
        what: what the holder does, for the line another process prints
            (``sweep of study 'x'``, ``trial``).
        mode: ``wait`` until the holder finishes (one line said), ``refuse`` (raise
            :class:`HostBusy` naming the holder), or ``off`` (no lock).
        say: where the waiting line goes (stderr by default).
        directory: the lock's folder (tests); :func:`lock_dir` by default.
    """
    if mode == "off":
        yield
        return
    folder = directory or lock_dir()
    with _open_lock(folder) as handle:
        _acquire(handle, folder, mode, say or _stderr)
        holder = Holder(os.getpid(), socket.gethostname(), what, _now())
        write_text_atomically(folder / "holder.json", json.dumps(asdict(holder)))
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                (folder / "holder.json").unlink()
            fcntl.flock(handle, fcntl.LOCK_UN)


def _acquire(handle: IO[str], folder: Path, mode: str, say: Callable[[str], None]) -> None:
    """Take the lock at once, or wait for it (saying so once), or refuse."""
    said = False
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            holder = read_holder(folder)
            who = holder.describe() if holder else "another loadertune process"
            if mode == "refuse":
                raise HostBusy(
                    f"this host is timing {who}; two timing processes on one host disturb "
                    "each other's measurements. Fix: wait for it to finish, or run with "
                    "host_lock=wait (a sweep: hydra.sweeper.host_lock=wait)"
                ) from None
            if not said:
                say(
                    f"loadertune: waiting: this host is timing {who}; this run starts when "
                    f"it ends (lock in {folder}; Ctrl-C to give up)"
                )
                said = True
            time.sleep(POLL_S)


def _now() -> str:
    return datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
