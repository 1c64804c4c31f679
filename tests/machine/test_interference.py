"""Other work on the machine: the arithmetic on synthetic counters, then real processes.

The tests on real processes bound what they assert by CPU time the test itself spent (read
from the process's own clock), never by wall time, so a CPU hog beside them can only add
to what they see.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from multiprocessing.connection import Connection

import psutil
import pytest

from loadertune.machine._interference import (
    CpuReading,
    Interference,
    InterferenceMeter,
    interference_between,
    measure_interference,
    proc_stat_ticks,
    tree_cpu,
)

BURN_S = 0.3  # CPU seconds a test process spends, by its own clock
TICK_S = 0.02  # counters move in clock ticks (10 ms): allow two


def counted(burned: float) -> float:
    """The least a tick-sampled counter may show for ``burned`` CPU seconds."""
    return 0.9 * burned - TICK_S


def test_other_work_is_busy_time_less_the_trees() -> None:
    # Over 2 s, the CPUs were busy 3 s in all, 1 s of it the tree's: others used 1 core.
    start = CpuReading(t=10.0, busy_s=100.0, steal_s=5.0, tree_s=20.0)
    end = CpuReading(t=12.0, busy_s=103.0, steal_s=5.2, tree_s=21.0)
    got = interference_between(start, end)
    assert got.other_cpu_percent == pytest.approx(100.0)
    assert got.steal_percent == pytest.approx(10.0)
    assert got.window_s == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        # Counters read a moment apart: the tree a tick ahead of the system is not negative.
        (CpuReading(0.0, 10.0, 0.0, 5.0), CpuReading(1.0, 10.5, 0.0, 5.51), (0.0, 0.0, 1.0)),
        # An empty window says nothing.
        (CpuReading(3.0, 10.0, 1.0, 5.0), CpuReading(3.0, 12.0, 2.0, 5.0), (0.0, 0.0, 0.0)),
        # Two cores of other work and a quarter core stolen over half a second.
        (CpuReading(0.0, 0.0, 0.0, 0.0), CpuReading(0.5, 1.5, 0.125, 0.5), (200.0, 25.0, 0.5)),
    ],
)
def test_interference_edges(
    start: CpuReading, end: CpuReading, expected: tuple[float, ...]
) -> None:
    got = interference_between(start, end)
    assert (got.other_cpu_percent, got.steal_percent, got.window_s) == pytest.approx(expected)


PROC_STAT = """\
cpu  100 10 50 1000 40 5 5 7 30 0
cpu0 60 10 20 500 20 3 2 4 30 0
cpu1 40 0 30 500 20 2 3 3 0 0
intr 12345 0 0
ctxt 999
"""


def test_proc_stat_counts_busy_and_steal_on_the_cpus_in_view() -> None:
    # user + nice + system + irq + softirq; guest is inside user already; idle, iowait out.
    assert proc_stat_ticks(PROC_STAT) == (170.0, 7.0)
    assert proc_stat_ticks(PROC_STAT, frozenset({0})) == (95.0, 4.0)
    assert proc_stat_ticks(PROC_STAT, frozenset({1})) == (75.0, 3.0)
    assert proc_stat_ticks(PROC_STAT, frozenset({0, 1})) == (170.0, 7.0)
    # A kernel that reports no steal column: none is counted.
    assert proc_stat_ticks("cpu  1 2 3 4\nintr 0\n") == (6.0, 0.0)


def _burn(seconds: float) -> float:
    """Spin until this process has used ``seconds`` of CPU; the CPU seconds used."""
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass
    return time.process_time() - start


def _burn_then_wait(conn: Connection) -> None:
    conn.send(_burn(BURN_S))
    conn.recv()  # stay alive (and unreaped) until told to go


def test_meter_counts_a_childs_cpu_as_the_trees() -> None:
    meter = InterferenceMeter()
    meter.start()
    parent_end, child_end = mp.Pipe()
    child = mp.get_context("fork").Process(target=_burn_then_wait, args=(child_end,))
    child.start()
    burned = parent_end.recv()
    got = meter.stop()
    parent_end.send("go")
    child.join()
    assert burned >= BURN_S
    assert meter.tree_cpu_s >= counted(burned)
    assert meter.cpu_s_by_pid.get(child.pid or -1, 0.0) == 0.0  # not alive at the start
    assert got.window_s > 0
    assert got.other_cpu_percent >= 0.0
    assert got.steal_percent >= 0.0


def test_reaped_children_still_count_for_the_tree() -> None:
    _, reaped_before = tree_cpu(_me())
    child = mp.get_context("fork").Process(target=_burn, args=(BURN_S,))
    child.start()
    child.join()  # reaped: its time moves into this process's children counters
    after, reaped_after = tree_cpu(_me())
    assert child.pid not in after
    assert reaped_after - reaped_before >= counted(BURN_S)


def test_work_outside_the_tree_is_other_work() -> None:
    # The tree is a sleeping child; this process, outside it, burns CPU meanwhile.
    parent_end, child_end = mp.Pipe()
    child = mp.get_context("fork").Process(target=_wait, args=(child_end,))
    child.start()
    try:
        meter = InterferenceMeter(child.pid)
        meter.start()
        burned = _burn(BURN_S)
        got = meter.stop()
    finally:
        parent_end.send("go")
        child.join()
    other_s = got.other_cpu_percent / 100.0 * got.window_s
    assert other_s >= counted(burned)
    assert meter.tree_cpu_s < burned / 2  # the sleeping tree did not take it


def test_measure_interference_blocks_for_its_window() -> None:
    got = measure_interference(0.05)
    assert isinstance(got, Interference)
    assert got.window_s >= 0.05
    assert got.other_cpu_percent >= 0.0


def test_stop_before_start_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="before start"):
        InterferenceMeter().stop()


def _wait(conn: Connection) -> None:
    conn.recv()


def _me() -> psutil.Process:
    return psutil.Process(os.getpid())
