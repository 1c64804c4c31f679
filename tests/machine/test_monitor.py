"""The process-tree monitor and its sampler process see the workers, not just the main process.

Nothing here waits on the wall clock: a child works until its own CPU clock says so, then
reports over a pipe and stays alive until told to go, so what is asserted is bounded by the
work the child did, which a CPU hog beside the test can slow but not shrink.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection

import psutil
import pytest

from loadertune.machine._monitor import ProcessTreeMonitor, ResourceSample, peak_memory_bytes
from loadertune.machine._tree_sampler import TreeSampler

MB = 2**20
BURN_S = 0.3  # CPU seconds the child spends, by its own clock
TOUCHED = 200 * MB  # memory the child makes resident


def _busy_child(conn: Connection) -> None:
    block = bytearray(TOUCHED)
    for i in range(0, len(block), 4096):  # touch every page so it is resident
        block[i] = 1
    start = time.process_time()
    while time.process_time() - start < BURN_S:
        pass
    conn.send(time.process_time() - start)
    conn.recv()  # stay alive, memory held, until the parent has looked


@contextmanager
def busy_child() -> Iterator[tuple[int, float]]:
    """A child that has touched ``TOUCHED`` bytes and burned ``BURN_S`` CPU seconds."""
    parent_end, child_end = mp.Pipe()
    child = mp.get_context("fork").Process(target=_busy_child, args=(child_end,))
    child.start()
    try:
        assert parent_end.poll(120), "the child never finished its work"
        yield int(child.pid or 0), parent_end.recv()
    finally:
        parent_end.send("go")
        child.join(30)


def test_child_cpu_and_memory_are_counted() -> None:
    monitor = ProcessTreeMonitor()
    before = monitor.sample()
    assert before is not None and before.memory_bytes is not None
    with busy_child() as (pid, burned):
        during = monitor.sample()
        assert pid in monitor.pids
    assert during is not None and during.memory_bytes is not None
    assert during.processes >= 2
    assert during.memory_bytes - before.memory_bytes > 0.75 * TOUCHED
    # The child's CPU seconds are in the tree's, whatever the wall time it took.
    assert monitor.cpu_seconds >= 0.9 * burned - 0.02
    assert monitor.memory_metric == "pss"


def test_a_sample_may_leave_memory_out() -> None:
    monitor = ProcessTreeMonitor()
    cpu_only = monitor.sample(memory=False)
    assert cpu_only is not None
    assert cpu_only.memory_bytes is None and cpu_only.rss_bytes is None
    assert cpu_only.processes >= 1
    full = monitor.sample()
    assert full is not None and full.memory_bytes is not None and full.rss_bytes is not None
    assert monitor.rss_bytes() > 0
    assert [s.memory_bytes for s in monitor.samples] == [None, full.memory_bytes]


def test_excluded_processes_are_left_out() -> None:
    with busy_child() as (pid, _):
        everyone = ProcessTreeMonitor().sample(memory=False)
        monitor = ProcessTreeMonitor(exclude={pid})
        rest = monitor.sample(memory=False)
        assert pid not in monitor.pids
    assert everyone is not None and rest is not None
    assert rest.processes == everyone.processes - 1


def test_peak_memory_skips_samples_without_memory() -> None:
    samples = [
        ResourceSample(0.0, 10.0, 5 * MB, 6 * MB, 1),
        ResourceSample(0.1, 10.0, None, None, 1),
        ResourceSample(0.2, 10.0, 7 * MB, 8 * MB, 2),
    ]
    assert peak_memory_bytes(samples) == 7 * MB
    assert peak_memory_bytes(samples[1:2]) == 0
    assert peak_memory_bytes([]) == 0


def test_sampler_process_sees_the_tree_but_not_itself() -> None:
    me = psutil.Process()
    with TreeSampler(hz=50) as sampler, busy_child() as (pid, burned):
        members = {p.pid for p in me.children(recursive=True)} - {sampler.pid}
        assert pid in members
        own_pss = me.memory_full_info().pss
        report = sampler.stop()  # the final sample is taken now, with the child alive
    assert len(report.samples) >= 1
    last = report.samples[-1]
    assert last.memory_bytes is not None  # the final sample always reads memory
    assert last.processes == 1 + len(members)  # the sampler left itself out
    assert last.memory_bytes > own_pss + 0.75 * TOUCHED
    assert sum(1 for s in report.samples if s.memory_bytes is not None) >= 1
    assert report.memory_metric == "pss"
    assert all(s.cpu_percent >= 0 for s in report.samples)
    assert [s.t for s in report.samples] == sorted(s.t for s in report.samples)
    assert burned > 0


def test_sampler_stops_though_a_forked_child_holds_its_pipe() -> None:
    # A DataLoader worker forked after the sampler started inherits its input pipe; the
    # sampler must still stop when asked, not when the worker exits.
    with TreeSampler(hz=20) as sampler, busy_child():
        start = time.perf_counter()
        report = sampler.stop()
        stopped_in = time.perf_counter() - start
    assert report.samples
    assert stopped_in < 25.0  # far below the 30 s after which the sampler would be killed
    assert sampler.pid is None
    assert sampler.stop() is report  # stopping twice is harmless


def test_sampler_is_gone_after_the_block() -> None:
    with TreeSampler(hz=20) as sampler:
        pid = sampler.pid
        assert pid is not None and psutil.pid_exists(pid)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(autouse=True)
def _no_stray_children() -> Iterator[None]:
    before = {p.pid for p in psutil.Process(os.getpid()).children()}
    yield
    after = {p.pid for p in psutil.Process(os.getpid()).children() if _alive(p.pid)}
    assert after <= before, "a test left a process behind"
