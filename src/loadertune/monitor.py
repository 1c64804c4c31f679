"""Sample the trial's process tree (main process and every DataLoader worker) with psutil.

Memory is summed PSS (falling back to USS, then RSS, where the OS lacks it): summed RSS counts
the pages workers share with the main process once per worker and overstates the footprint.
CPU is the tree's CPU time over wall time, in percent of one core.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class ResourceSample:
    """The process tree at one instant."""

    t: float
    cpu_percent: float
    memory_bytes: int
    rss_bytes: int
    processes: int


class ProcessTreeMonitor:
    """A background thread sampling ``pid`` and its descendants ``hz`` times a second.

    ``cpu_seconds`` accumulates the tree's CPU time as sampled (a process that exits between
    samples loses at most one interval), so CPU use over any window is the difference of two
    readings over the wall time between them.
    """

    def __init__(self, pid: int | None = None, hz: float = 20.0) -> None:
        self.root = psutil.Process(pid or os.getpid())
        self.interval = 1.0 / hz
        self.samples: list[ResourceSample] = []
        self.memory_metric = "pss"
        self._cpu_seen: dict[int, float] = {}
        self._procs: dict[int, psutil.Process] = {}
        self._last_t = 0.0
        self.cpu_seconds = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loadertune-monitor", daemon=True)

    def __enter__(self) -> ProcessTreeMonitor:
        self._last_t = time.perf_counter()
        self._cpu_seen = {p.pid: _cpu_s(p) for p in self._tree()}
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def _tree(self) -> list[psutil.Process]:
        procs = [self.root]
        with contextlib.suppress(psutil.Error):
            procs += self.root.children(recursive=True)
        # Keep one Process object per pid so psutil's per-object caches stay valid.
        self._procs = {p.pid: self._procs.get(p.pid, p) for p in procs}
        return list(self._procs.values())

    @property
    def pids(self) -> set[int]:
        """Every process of the tree seen so far."""
        return set(self._procs)

    def sample(self) -> ResourceSample | None:
        """Take one sample now (the thread calls this; so may the trial, to mark a moment)."""
        with self._lock:
            return self._sample()

    def _sample(self) -> ResourceSample | None:
        now = time.perf_counter()
        cpu_delta = 0.0
        memory = rss = 0
        alive = 0
        seen: dict[int, float] = {}
        for proc in self._tree():
            try:
                cpu = _cpu_s(proc)
                mem = proc.memory_full_info()
            except psutil.Error:
                continue
            alive += 1
            seen[proc.pid] = cpu
            cpu_delta += cpu - self._cpu_seen.get(proc.pid, 0.0)
            rss += mem.rss
            pss = getattr(mem, "pss", None)
            uss = getattr(mem, "uss", None)
            if pss is not None:
                memory += pss
            elif uss is not None:
                memory += uss
                self.memory_metric = "uss"
            else:
                memory += mem.rss
                self.memory_metric = "rss"
        dt = now - self._last_t
        self._last_t = now
        self._cpu_seen = seen
        self.cpu_seconds += max(cpu_delta, 0.0)
        if dt <= 0 or alive == 0:
            return None
        sample = ResourceSample(now, 100.0 * max(cpu_delta, 0.0) / dt, memory, rss, alive)
        self.samples.append(sample)
        return sample


def _cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)
