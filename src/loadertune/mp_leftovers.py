"""The ``pymp-*`` folders killed DataLoader workers leave in the temp folder, and their removal.

A worker that sends a batch's storage by file descriptor (PyTorch's ``file_descriptor``
sharing, its default on Linux) starts multiprocessing's ``resource_sharer``: a Unix socket
listening in a fresh ``pymp-*`` folder of the temp folder, which the worker's exit handlers
remove. A worker killed with its trial (pruned, timed out) or stopped by AutoLoader never
runs them, and the folder stays: a sweep left two for each pruned trial. A folder whose every
entry is a socket no process has bound (the kernel's table of Unix sockets, Linux's
``/proc/net/unix``, lists every bound path) serves nobody and goes, whoever made it; a folder
still empty, or holding anything else, stays. The table is the reader's network namespace's:
a process in another one that shares this temp folder is not seen, so only folders changed
since the trial began are looked at. Elsewhere than Linux nothing is removed.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

UNIX_SOCKETS = Path("/proc/net/unix")


def remove_dead_listener_dirs(since: float, parent: Path | None = None) -> int:
    """Remove this user's ``pymp-*`` folders changed since ``since`` (epoch seconds) that hold
    only sockets nobody has bound; how many went."""
    bound = _bound_paths()
    if bound is None:
        return 0
    removed = 0
    for folder in (parent or Path(tempfile.gettempdir())).glob("pymp-*"):
        with contextlib.suppress(OSError):
            info = folder.lstat()
            if info.st_uid != os.getuid() or info.st_mtime < since:
                continue
            entries = list(folder.iterdir())
            if not entries or not all(_dead_socket(e, bound) for e in entries):
                continue
            for entry in entries:
                entry.unlink()
            folder.rmdir()
            removed += 1
    return removed


def _dead_socket(path: Path, bound: set[str]) -> bool:
    return stat.S_ISSOCK(path.lstat().st_mode) and os.path.realpath(path) not in bound


def _bound_paths() -> set[str] | None:
    """Every path a Unix socket is bound to now (None where the kernel does not say)."""
    try:
        lines = UNIX_SOCKETS.read_text().splitlines()[1:]
    except OSError:
        return None
    return {os.path.realpath(f[7]) for line in lines if len(f := line.split()) > 7}
