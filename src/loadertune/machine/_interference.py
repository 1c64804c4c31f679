"""How much of the machine other work took while something was measured.

On a shared machine a trial's figure moves with whatever else runs. Two readings, one at
each end of a window, tell how much: the CPU time the kernel counts as busy on the CPUs this
process may use (``/proc/stat``; psutil's ``cpu_times`` where that is missing), minus the CPU
time of the measured process tree (a root and its descendants, reaped ones included), is the
work of everything else; steal time is what a hypervisor gave to other guests. Reading the
counters costs about a millisecond, so the meter runs around every timed window, and the
sweep can probe the machine between trials with :func:`measure_interference`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import psutil

from loadertune.machine._monitor import tree_members
from loadertune.machine._run_queue import Sched, cpu_wait_procs, run_waits

QUIET_SHARE = 0.10  # other work's share of the usable CPUs under which figures are one's own


def other_share(other_cpu_percent: float, steal_percent: float, cpus: int) -> float:
    """Other work and steal (each in % of one core) as a share of ``cpus`` usable CPUs'
    capacity (0..1): the one figure the verdict, the search's stop and a trial's diagnosis
    compare with their lines for a busy machine."""
    return (other_cpu_percent + steal_percent) / (100.0 * max(cpus, 1))


@dataclass(frozen=True)
class Interference:
    """Work outside the measured process tree over a window."""

    other_cpu_percent: float  # % of one core used by processes outside the tree, averaged
    steal_percent: float  # % of one core stolen by the hypervisor (0 where not reported)
    window_s: float


@dataclass(frozen=True)
class CpuReading:
    """CPU seconds counted up to one instant: busy and stolen on the CPUs in view (all of
    them together), and used by the measured tree."""

    t: float
    busy_s: float
    steal_s: float
    tree_s: float


def interference_between(start: CpuReading, end: CpuReading) -> Interference:
    """The work outside the tree between two readings, in percent of one core.

    Counters read a moment apart can disagree by a tick; other work is never negative.
    """
    window = end.t - start.t
    if window <= 0:
        return Interference(0.0, 0.0, 0.0)
    tree = end.tree_s - start.tree_s
    other = max(end.busy_s - start.busy_s - tree, 0.0)
    steal = max(end.steal_s - start.steal_s, 0.0)
    return Interference(100.0 * other / window, 100.0 * steal / window, window)


class InterferenceMeter:
    """Measures :class:`Interference` between :meth:`start` and :meth:`stop`.

    The tree is ``root_pid`` (this process by default) and its descendants. After
    :meth:`stop`, ``tree_cpu_s`` holds the tree's CPU seconds over the window and
    ``cpu_s_by_pid`` each member's (those alive at both ends), so a caller can set its own
    helpers apart; :meth:`cpu_wait_procs` how long the members waited for a CPU
    (:mod:`loadertune.machine._run_queue`).
    """

    def __init__(self, root_pid: int | None = None) -> None:
        self.root = psutil.Process(root_pid or os.getpid())
        self.cpus = _cpus_in_view()
        self.tree_cpu_s = 0.0
        self.cpu_s_by_pid: dict[int, float] = {}
        self._start: CpuReading | None = None
        self._start_by_pid: dict[int, float] = {}
        self._waits: tuple[dict[int, Sched], dict[int, Sched]] = ({}, {})
        self._window_s = 0.0

    def read(self) -> tuple[CpuReading, dict[int, float]]:
        """One reading now, with each tree member's own CPU seconds."""
        by_pid, reaped = tree_cpu(self.root)
        busy, steal = system_cpu(self.cpus)
        reading = CpuReading(time.perf_counter(), busy, steal, sum(by_pid.values()) + reaped)
        return reading, by_pid

    def start(self) -> None:
        """Open the window."""
        self._start, self._start_by_pid = self.read()
        self._waits = (run_waits(self._start_by_pid), {})

    def stop(self) -> Interference:
        """Close the window; the work outside the tree since :meth:`start`."""
        if self._start is None:
            raise RuntimeError("InterferenceMeter.stop() before start()")
        end, by_pid = self.read()
        self._waits = (self._waits[0], run_waits(by_pid))
        self._window_s = end.t - self._start.t
        self.tree_cpu_s = end.tree_s - self._start.tree_s
        self.cpu_s_by_pid = {
            pid: cpu - self._start_by_pid[pid]
            for pid, cpu in by_pid.items()
            if pid in self._start_by_pid
        }
        return interference_between(self._start, end)

    def cpu_wait_procs(self, exclude: tuple[int, ...] = ()) -> float | None:
        """After :meth:`stop`: how many of the tree's workers (less ``exclude``) were queued
        for a CPU, on average (:func:`loadertune.machine._run_queue.cpu_wait_procs`)."""
        return cpu_wait_procs(*self._waits, self._window_s, self.root.pid, exclude)


def measure_interference(seconds: float, root_pid: int | None = None) -> Interference:
    """Watch the machine for ``seconds`` (blocking): the work outside ``root_pid``'s tree."""
    meter = InterferenceMeter(root_pid)
    meter.start()
    time.sleep(seconds)
    return meter.stop()


def tree_cpu(root: psutil.Process) -> tuple[dict[int, float], float]:
    """Each living member's own CPU seconds, and those of descendants already reaped.

    A finished child's time moves into its parent's ``children_*`` counters when the parent
    waits for it, so the sum of both parts only ever grows while members come and go.
    """
    members = tree_members(root)
    by_pid: dict[int, float] = {}
    reaped = 0.0
    for proc in members:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        by_pid[proc.pid] = times.user + times.system
        reaped += times.children_user + times.children_system
    return by_pid, reaped


def _cpus_in_view() -> frozenset[int] | None:
    """The CPUs this process may run on; None when that is every CPU (or unknown)."""
    try:
        allowed = frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    return None if len(allowed) >= (os.cpu_count() or 0) else allowed


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def system_cpu(cpus: frozenset[int] | None = None) -> tuple[float, float]:
    """(busy, steal) CPU seconds since boot over ``cpus`` (None: every CPU)."""
    try:
        with open("/proc/stat") as stat:
            busy, steal = proc_stat_ticks(stat.read(), cpus)
    except OSError:
        t = psutil.cpu_times()
        busy_s = t.user + t.system + getattr(t, "nice", 0.0)
        busy_s += getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
        return busy_s, getattr(t, "steal", 0.0)
    return busy / _TICK, steal / _TICK


def proc_stat_ticks(text: str, cpus: frozenset[int] | None = None) -> tuple[float, float]:
    """(busy, steal) clock ticks in the text of ``/proc/stat``: the ``cpu`` line's when
    ``cpus`` is None, else the sum of the ``cpuN`` lines for N in ``cpus``.

    Busy is user, nice, system, irq and softirq time (guest time is already in user and
    nice); idle and I/O wait are not work, steal is counted apart.
    """
    busy = steal = 0.0
    for line in text.splitlines():
        name, *fields = line.split() or [""]
        if not name.startswith("cpu"):
            break  # the CPU lines come first
        wanted = name == "cpu" if cpus is None else name != "cpu" and int(name[3:]) in cpus
        if not wanted:
            continue
        ticks = [float(f) for f in fields] + [0.0] * 8
        busy += ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6]
        steal += ticks[7]
    return busy, steal
