"""The trial process takes back what a dead rank leaves running, and stops it at once.

A DataLoader worker forked by a rank inherits the rank's sockets (its connections to the
other ranks) and the pipe through which the launcher watches the rank's exit. When a rank
dies without a Python error (killed, ``os._exit``), its workers live on, reparented, until
they notice their parent gone (PyTorch's workers look every 5 s): until then the other
ranks' collectives see no broken connection and the launcher sees no exit, and a loaded
machine can show the launcher a follower's error first. As the child subreaper of its tree
(Linux's ``PR_SET_CHILD_SUBREAPER``) the trial process gets such orphans back as its own
children, where :class:`~loadertune.ranks.board.Watchdog` finds and kills them; it reaps
them too (no other part of the process knows them). Elsewhere than Linux nothing changes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Iterator

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


@contextlib.contextmanager
def subreaper() -> Iterator[bool]:
    """This process is its descendants' subreaper inside the block (True where it could be);
    a process that already was one stays one."""
    if not sys.platform.startswith("linux"):
        yield False
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        was = ctypes.c_int(0)
        libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(was))
        made = was.value == 0 and libc.prctl(_PR_SET_CHILD_SUBREAPER, 1) == 0
    except (OSError, AttributeError):
        yield False
        return
    try:
        yield made or was.value != 0
    finally:
        if made:
            libc.prctl(_PR_SET_CHILD_SUBREAPER, 0)


def reap(pids: set[int]) -> set[int]:
    """Collect the exits of those of ``pids`` (this process's adopted children) that ended;
    the ones still running (or not this process's children)."""
    left = set()
    for pid in pids:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue  # not ours (any more): nothing to collect
        if not done:
            left.add(pid)
    return left
