"""A trial process's group as the sweep sees it: ended or not, its members, killed whole;
the ``/dev/shm`` files PyTorch names for processes; the cgroup's OOM-kill counter.

The trial process leads a process group of its own: its ranks, DataLoader workers and
sampler are members (:mod:`._trial_process`). The sweep reaps the leader last, so the
group's id cannot pass to another process while the sweep still acts on it.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Any

import psutil

SHM = Path("/dev/shm")


def ended(pid: int) -> bool:
    """Whether the trial process has exited, left unreaped (its pid, the group's id, stays
    taken until :meth:`._trial_process._Follower._exited` collects it)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def kill_group(proc: Any) -> None:
    """Kill the trial's process group: the trial and every DataLoader worker it started."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.join()


def group_members(pgid: int) -> list[psutil.Process]:
    members = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if os.getpgid(p.pid) == pgid and p.pid != os.getpid():
                members.append(p)
    return members


def exited(proc: psutil.Process) -> bool:
    """Whether ``proc`` has already ended: a zombie, a killed worker whose parent (the trial)
    is gone, waits only for its new parent to reap it. Waiting for that here cost up to 2 s
    of every pruned trial where the machine's init reaps slowly; it is neither alive nor
    ours to wait for."""
    try:
        return bool(proc.status() == psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return True


def shm_owner(name: str) -> int | None:
    """The pid in a ``torch_<pid>_<random>_<n>`` shared-memory file name."""
    parts = name.split("_")
    return int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else None


def shm_files() -> set[str]:
    try:
        return {p.name for p in SHM.iterdir() if p.name.startswith("torch_")}
    except OSError:
        return set()


def oom_kills() -> int:
    """The cgroup's OOM-kill counter (cgroup v2), to confirm a kill was the OOM killer's."""
    try:
        for line in Path("/sys/fs/cgroup/memory.events").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0
