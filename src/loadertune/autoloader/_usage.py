"""A segment's figures from its process tree (CPU time, peak memory, run-queue wait), and
the steps at which a probe's memory is read.

Read between two cycles of the training loop, never inside one: each read visits every
process of the tree (psutil, the kernel's scheduler statistics).
"""

from __future__ import annotations

import os

from loadertune.autoloader._probe import tree_usage
from loadertune.autoloader._schedule import Measure
from loadertune.machine import Sched, queued_s, run_waits

MEMORY_CHECK_EVERY = 4  # a probe's memory is first read at this step of its segment
READ_STEPS_PER_PROCESS = 2  # then every this many steps per process read (workers + 1)


def memory_read_due(step: int, workers: int) -> bool:
    """Whether the probe's memory is read at ``step`` of its segment: at MEMORY_CHECK_EVERY
    (the workers' start-up is where memory grows), then spaced by the processes a read visits.

    A read costs about 0.13 ms per process (psutil, 16 workers: 2.2 ms), inside the training
    loop: read every 4 steps it took 0.5 ms a step from 16 workers and 0.3 ms from 8, a bias
    against more workers larger than the noise the decision allows. Spaced so, every setting
    pays the same small share. Steps, not seconds: every rank reads (and agrees) at the same
    step.
    """
    every = max(MEMORY_CHECK_EVERY, READ_STEPS_PER_PROCESS * (workers + 1))
    return step == MEMORY_CHECK_EVERY or (
        step > MEMORY_CHECK_EVERY and (step - MEMORY_CHECK_EVERY) % every == 0
    )


def read_usage(m: Measure, pids: list[int], cpu0: float) -> float:
    """The tree's CPU time since the segment began (at ``cpu0``), and its peak memory, into
    ``m``; the tree's CPU seconds read."""
    cpu, rss = tree_usage(pids)
    m.tree_cpu_s = cpu - cpu0
    m.peak_rss_mb = max(m.peak_rss_mb, rss)
    return cpu


def sched_now(pids: list[int]) -> dict[int, Sched]:
    """This process's and the workers' run-queue figures now."""
    return run_waits([os.getpid(), *pids])


def queued(sched0: dict[int, Sched], pids: list[int]) -> float | None:
    """Seconds the probe's workers (without workers, this process) waited for a CPU from
    the segment's first steady cycle (``sched0``) to now: the start-up before it, when new
    workers all want a CPU, is the switch's cost. None before a steady cycle, or where the
    kernel does not say."""
    root = os.getpid()
    return queued_s(sched0, run_waits([root, *pids]), root)
