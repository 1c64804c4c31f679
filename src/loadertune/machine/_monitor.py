"""Sample the trial's process tree (main process and every DataLoader worker) with psutil.

Memory is summed PSS (falling back to USS, then RSS, where the OS lacks it): summed RSS counts
the pages workers share with the main process once per worker and overstates the footprint.
CPU is the tree's CPU time over wall time, in percent of one core.

Reading PSS is the expensive part (the kernel walks every mapping: about 5 ms of CPU for a
process with torch loaded), reading CPU times is cheap (tens of microseconds), and listing
the tree scans every process on the machine. So a sample may leave memory out, and the list
of members may be reused for ``refresh_s`` seconds.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Collection
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class ResourceSample:
    """The process tree at one instant; memory is None where this sample did not read it."""

    t: float
    cpu_percent: float  # over the interval since the previous sample, % of one core
    memory_bytes: int | None
    rss_bytes: int | None
    processes: int


@dataclass(frozen=True)
class _Memory:
    footprint: int
    rss: int
    metric: str


class ProcessTreeMonitor:
    """Samples ``pid`` and its descendants, less ``exclude``, each time :meth:`sample` is called.

    ``cpu_seconds`` accumulates the tree's CPU time as sampled (a process that exits between
    samples loses at most one interval), so CPU use over any window is the difference of two
    readings over the wall time between them.
    """

    def __init__(
        self, pid: int | None = None, exclude: Collection[int] = (), refresh_s: float = 0.0
    ) -> None:
        self.root = psutil.Process(pid or os.getpid())
        self.exclude = set(exclude)
        self.refresh_s = refresh_s
        self.samples: list[ResourceSample] = []
        self.memory_metric = "pss"
        self.cpu_seconds = 0.0
        self._procs: dict[int, psutil.Process] = {}
        self._listed_at = -float("inf")
        self._last_t = time.perf_counter()
        self._cpu_seen = {p.pid: _cpu_s(p) for p in self._tree()}

    def _tree(self) -> list[psutil.Process]:
        now = time.perf_counter()
        if now - self._listed_at >= self.refresh_s:
            self._listed_at = now
            # Keep one Process object per pid so psutil's per-object caches stay valid.
            self._procs = {
                p.pid: self._procs.get(p.pid, p)
                for p in tree_members(self.root)
                if p.pid not in self.exclude
            }
        return list(self._procs.values())

    def relist(self) -> None:
        """List the tree's members afresh at the next sample, whatever ``refresh_s`` says."""
        self._listed_at = -float("inf")

    @property
    def pids(self) -> set[int]:
        """Every process of the tree seen so far."""
        return set(self._procs)

    def rss_bytes(self) -> int:
        """The tree's summed RSS now: cheap to read, and never below its summed PSS."""
        return sum(self.rss_by_pid().values())

    def rss_by_pid(self) -> dict[int, int]:
        """Each member's RSS now, by pid (a member gone meanwhile left out)."""
        found: dict[int, int] = {}
        for proc in self._tree():
            with contextlib.suppress(psutil.Error):
                found[proc.pid] = proc.memory_info().rss
        return found

    def sample(self, memory: bool = True) -> ResourceSample | None:
        """Take one sample now (PSS too unless ``memory`` is false); None if the tree is gone."""
        now = time.perf_counter()
        seen: dict[int, float] = {}
        memories: list[_Memory] = []
        for proc in self._tree():
            try:
                seen[proc.pid] = _cpu_s(proc)
                if memory:
                    memories.append(_memory(proc))
            except psutil.Error:
                seen.pop(proc.pid, None)
                self.relist()  # a member left: list the tree again
        cpu_delta = max(sum(cpu - self._cpu_seen.get(pid, 0.0) for pid, cpu in seen.items()), 0.0)
        dt, self._last_t, self._cpu_seen = now - self._last_t, now, seen
        self.cpu_seconds += cpu_delta
        if dt <= 0 or not seen:
            return None
        footprint = rss = None
        if memory:
            footprint = sum(m.footprint for m in memories)
            rss = sum(m.rss for m in memories)
            for m in memories:
                if m.metric != "pss":
                    self.memory_metric = m.metric
        sample = ResourceSample(now, 100.0 * cpu_delta / dt, footprint, rss, len(seen))
        self.samples.append(sample)
        return sample


def tree_members(root: psutil.Process) -> list[psutil.Process]:
    """``root`` and its living descendants.

    Read from each thread's ``/proc/<pid>/task/<tid>/children`` where the kernel offers it
    (a tenth of a millisecond for a few processes); psutil's way, which reads every process
    on the machine to find the parents (over a millisecond), elsewhere.
    """
    pids = _descendant_pids(root.pid)
    if pids is None:
        with contextlib.suppress(psutil.Error):
            return [root, *root.children(recursive=True)]
        return [root]
    members = [root]
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            members.append(psutil.Process(pid))
    return members


def _descendant_pids(root: int) -> list[int] | None:
    """Every descendant's pid from the kernel's per-thread children lists; None without."""
    if not os.path.exists(f"/proc/{root}/task/{root}/children"):
        return None
    found: list[int] = []
    stack = [root]
    while stack:
        pid = stack.pop()
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # gone meanwhile
        for tid in threads:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as listing:
                    children = [int(c) for c in listing.read().split()]
            except OSError:
                continue
            found += children
            stack += children
    return found


def _cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def _memory(proc: psutil.Process) -> _Memory:
    mem = proc.memory_full_info()
    pss = getattr(mem, "pss", None)
    if pss is not None:
        return _Memory(pss, mem.rss, "pss")
    uss = getattr(mem, "uss", None)
    if uss is not None:
        return _Memory(uss, mem.rss, "uss")
    return _Memory(mem.rss, mem.rss, "rss")


def peak_memory_bytes(samples: Collection[ResourceSample]) -> int:
    """The largest memory reading among ``samples`` (0 when none read memory)."""
    return max((s.memory_bytes for s in samples if s.memory_bytes is not None), default=0)
