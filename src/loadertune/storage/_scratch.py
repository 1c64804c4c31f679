"""Per-trial scratch folders on a RAM file system, and the clean-up a killed trial skipped.

A pruned or timed-out trial is killed with SIGKILL, so it never removes what it put in
``/dev/shm``; left there, those copies would starve later trials of shared memory. Every
scratch folder is named ``loadertune-<pid>-<random>``, and creating one first removes the
folders of this user whose process is gone. A trial of several ranks keeps its launcher's
logs the same way, in ``loadertune-ranks-<pid>-<random>`` in the temp folder.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from pathlib import Path

import psutil

PREFIX = "loadertune-"
RANKS_PREFIX = "loadertune-ranks-"  # a multi-rank trial's launcher logs, in the temp folder


def default_parent() -> Path:
    """``/dev/shm`` where it exists (RAM, shared by all processes), else the temp folder."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return shm
    return Path(tempfile.gettempdir())


def make_scratch(parent: Path, prefix: str = PREFIX) -> Path:
    """A fresh folder under ``parent`` owned by this process, after removing stale ones."""
    remove_stale(parent, prefix)
    path = parent / f"{prefix}{os.getpid()}-{secrets.token_hex(4)}"
    path.mkdir(mode=0o700)
    return path


def remove_stale(parent: Path, prefix: str = PREFIX) -> list[Path]:
    """Remove this user's scratch folders under ``parent`` whose process has exited."""
    removed = []
    for entry in parent.glob(f"{prefix}*"):
        pid = _owner_pid(entry, prefix)
        if pid is None or _alive(pid):
            continue
        with contextlib.suppress(OSError):
            if entry.lstat().st_uid != os.getuid():
                continue
            shutil.rmtree(entry)
            removed.append(entry)
    return removed


def remove(path: Path) -> None:
    """Remove a scratch folder, whatever is in it."""
    shutil.rmtree(path, ignore_errors=True)


def _owner_pid(entry: Path, prefix: str = PREFIX) -> int | None:
    parts = entry.name[len(prefix) :].split("-")
    if len(parts) != 2 or not parts[0].isdigit():
        return None
    return int(parts[0])


def _alive(pid: int) -> bool:
    """``pid`` runs: a zombie has ended (its owner killed, it waits for init to reap it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return pid <= 0 or psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True
