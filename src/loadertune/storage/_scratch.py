"""Per-trial scratch folders on a RAM file system, and the clean-up a killed trial skipped.

A pruned or timed-out trial is killed with SIGKILL, so it never removes what it put in
``/dev/shm``; left there, those copies would starve later trials of shared memory. Every
scratch folder is named ``loadertune-<pid>-<random>``, and creating one first removes the
folders of this user whose process is gone.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from pathlib import Path

PREFIX = "loadertune-"


def default_parent() -> Path:
    """``/dev/shm`` where it exists (RAM, shared by all processes), else the temp folder."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return shm
    return Path(tempfile.gettempdir())


def make_scratch(parent: Path) -> Path:
    """A fresh folder under ``parent`` owned by this process, after removing stale ones."""
    remove_stale(parent)
    path = parent / f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
    path.mkdir(mode=0o700)
    return path


def remove_stale(parent: Path) -> list[Path]:
    """Remove this user's scratch folders under ``parent`` whose process has exited."""
    removed = []
    for entry in parent.glob(f"{PREFIX}*"):
        pid = _owner_pid(entry)
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


def _owner_pid(entry: Path) -> int | None:
    parts = entry.name[len(PREFIX) :].split("-")
    if len(parts) != 2 or not parts[0].isdigit():
        return None
    return int(parts[0])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
