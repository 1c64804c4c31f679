"""How long a process tree waited for a CPU: the kernel's run-queue wait, per process.

``/proc/<pid>/task/<tid>/schedstat`` holds a thread's time on a CPU, its time waiting on a run
queue (ready to run, every CPU taken) and its timeslices, in nanoseconds. A worker waiting
for storage sleeps and adds nothing to the wait; one that is ready to decode but finds the
CPUs taken (by other work, or by more processes than CPUs) does. Over a window, the tree's
wait divided by the window and its processes is ``cpu_wait_procs``: the share of the time a
trial's process spent, on average, waiting for a CPU. The diagnosis reads it to tell
"waiting for a CPU" from "waiting on reads". Linux only; elsewhere there is no figure (None).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

NS = 1e-9


Sched = tuple[float, float]  # (seconds on a CPU, seconds waiting on a run queue)


def sched_s(pid: int) -> Sched | None:
    """All of ``pid``'s threads' time on a CPU and waiting for one (None: not readable)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    ran = waited = 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as handle:
                fields = handle.read().split()
            ran, waited = ran + int(fields[0]), waited + int(fields[1])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended between the listing and the read
    return ran * NS, waited * NS


def run_waits(pids: Iterable[int]) -> dict[int, Sched]:
    """Each readable process's time on a CPU and waiting for one, so far."""
    found = {}
    for pid in pids:
        sched = sched_s(pid)
        if sched is not None:
            found[pid] = sched
    return found


def queued_s(
    start: Mapping[int, Sched], end: Mapping[int, Sched], root: int, exclude: Iterable[int] = ()
) -> float | None:
    """Seconds the processes alive at both ends (``root``'s workers, else ``root``; less
    ``exclude``: a sampler of the trial's own) waited for a CPU between them, summed; None
    without any."""
    skip = set(exclude)
    pids = [pid for pid in end if pid in start and pid not in skip]
    workers = [pid for pid in pids if pid != root]
    pids = workers or pids
    if not pids:
        return None
    return sum(max(end[p][1] - start[p][1], 0.0) for p in pids)


def cpu_wait_procs(
    start: Mapping[int, Sched],
    end: Mapping[int, Sched],
    window_s: float,
    root: int,
    exclude: Iterable[int] = (),
) -> float | None:
    """How many of the processes alive at both ends (:func:`queued_s`'s) were queued for a
    CPU over the window, on average; None without any."""
    queued = queued_s(start, end, root, exclude)
    if queued is None or window_s <= 0:
        return None
    return queued / window_s
