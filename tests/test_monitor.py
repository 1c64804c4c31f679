"""The process-tree monitor sees the workers' CPU and memory, not just the main process."""

from __future__ import annotations

import multiprocessing as mp
import time

from loadertune.monitor import ProcessTreeMonitor

MB = 2**20


def _busy_child(megabytes: int, seconds: float) -> None:
    block = bytearray(megabytes * MB)
    for i in range(0, len(block), 4096):  # touch every page so it is resident
        block[i] = 1
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_child_cpu_and_memory_are_counted() -> None:
    monitor = ProcessTreeMonitor(hz=20)
    with monitor:
        time.sleep(0.2)
        baseline = max(s.memory_bytes for s in monitor.samples)
        child = mp.get_context("fork").Process(target=_busy_child, args=(200, 1.5))
        child.start()
        time.sleep(1.2)
        during = list(monitor.samples)
        child.join()
    busy = [s for s in during if s.processes >= 2]
    assert busy, "the child process was never sampled"
    assert max(s.memory_bytes for s in busy) - baseline > 150 * MB
    # A child spinning on one core shows as roughly 100% of one core on top of the main process.
    assert max(s.cpu_percent for s in busy) > 60.0
    assert monitor.memory_metric == "pss"


def test_samples_at_the_requested_rate() -> None:
    monitor = ProcessTreeMonitor(hz=20)
    with monitor:
        time.sleep(1.0)
    assert 12 <= len(monitor.samples) <= 21
