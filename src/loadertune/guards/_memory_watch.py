"""Keep a trial's process tree under its memory budget: when to sample, and when to stop it.

A leaking worker can add a gigabyte a second, so a guard that samples at a fixed pace and
stops the tree once a sample is over the budget overshoots by whatever grew in between.
:class:`BudgetPacer` instead samples faster as the tree nears the budget and stops it as soon
as the growth seen between samples would carry it past the budget before the next sample
(plus the time a kill takes). Its readings are cheap: summed RSS (microseconds a process)
every time, PSS (milliseconds a process, the figure the budget is about) only now and then,
when the tree's members change and near the budget. In between, PSS is estimated as RSS less
the shared pages the last PSS reading found double-counted: a leak is private memory, so it
grows both alike. Both the sweep (``trial._trial_process._MemoryGuard``, from the sweep
process) and a single trial (:class:`TrialMemoryWatch`, a thread in the trial process) use it.

Start-up is not a leak. A process that joins the tree (a rank, a DataLoader worker) is a fork:
its RSS at first sight is its parent's pages, counted already, and what it adds is predicted
by the preflight's per-worker figure (:func:`loadertune.checks._preflight.worker_mb`: its own memory
and the batches it keeps in flight), which the trial tells the guard before any worker starts
(:func:`expect_workers`). So a newcomer's RSS moves the estimate by nothing, and growth up to
that prediction for the members that joined is not extrapolated: only growth beyond it is.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from loadertune.checks import worker_mb
from loadertune.machine import ProcessTreeMonitor

if TYPE_CHECKING:
    from loadertune.checks import Batch

SLOW_S = 0.25  # between samples while the tree is far from the budget
FAST_S = 0.01  # between samples at the closest
PSS_FAR_S = 1.0  # between PSS readings under half the budget
PSS_NEAR_S = 0.2  # ... and above it
ACT_S = 0.03  # from deciding to stop to the tree's memory no longer growing (a SIGKILL)
PSS_CPU_SHARE = 0.01  # far from the budget, PSS readings take at most this share of a core
RATE_WINDOW = 6  # growth is the fastest seen over this many recent intervals
UNSEEN_RATE = 2 * 2**30  # bytes/s: a leak this fast, not yet seen, still finds a reading in time


class BudgetPacer:
    """Decides, one reading at a time, whether a growing tree must stop to stay under budget.

    Call :meth:`observe` with each member's RSS read now; it asks ``read_pss`` for the tree's
    PSS when it needs one. ``next_in`` says when to call it again.
    """

    def __init__(self, budget: int, pss_far_s: float | None = PSS_FAR_S) -> None:
        self.budget = budget
        self.pss_far_s = pss_far_s  # None: no PSS while summed RSS (>= PSS) is under half
        self.peak = 0  # the largest footprint seen (PSS, or RSS once over the budget)
        self.estimate = 0
        self.next_in = 0.0
        self.per_process = _bytes(worker_mb())  # a joining process's predicted footprint
        self._credit = 0  # growth predicted for the members that joined, not yet seen
        self._shared = 0  # summed RSS less PSS at the last PSS reading, and newcomers' RSS
        self._rss: dict[int, int] = {}  # each member's RSS at the last reading
        self._pids: frozenset[int] = frozenset()
        self._pss_at = -float("inf")
        self._pss_cost = 0.0  # seconds the last PSS reading took
        self._last: tuple[float, int] | None = None
        self._rates: deque[float] = deque(maxlen=RATE_WINDOW)
        self._late: deque[float] = deque(maxlen=RATE_WINDOW)  # readings past when asked

    def expect_workers(self, per_worker: int) -> None:
        """Each process that joins from now on is predicted to add ``per_worker`` bytes (the
        pre-flight's figure, told through :func:`expect_workers`)."""
        self.per_process = per_worker

    def observe(self, now: float, rss: Mapping[int, int], read_pss: Callable[[], int]) -> bool:
        """Take in one reading (each member's RSS); True when the tree must stop now."""
        total = sum(rss.values())
        pids = frozenset(rss)
        self._follow_members(rss)
        settled = False
        if self._pss_due(now, total, pids):
            began = time.perf_counter()
            pss = read_pss()
            self._pss_cost = time.perf_counter() - began
            settled = pids == self._pids  # measured twice as they are: the start-up is over
            self._shared, self._pids, self._pss_at = max(total - pss, 0), pids, now
        self.estimate = min(max(total - self._shared, 0), total)  # PSS <= RSS
        if self._last is not None and now > self._last[0]:
            gap = now - self._last[0]
            self._rates.append(self._unpredicted(self.estimate - self._last[1]) / gap)
            self._late.append(max(gap - self.next_in, 0.0))
        if settled:
            self._credit = 0
        self._last = (now, self.estimate)
        rate = max(self._rates, default=0.0)
        self.peak = max(self.peak, self.estimate)
        self.next_in = self._interval(rate)
        # On a busy machine readings come later than asked: look as much further ahead.
        ahead = self.next_in + max(self._late, default=0.0) + ACT_S
        return self.estimate + rate * ahead > self.budget

    def _follow_members(self, rss: Mapping[int, int]) -> None:
        """Members that joined or left since the last reading move the estimate by nothing
        until a PSS reading measures them: a newcomer's RSS is its parent's pages, and what it
        adds is predicted (:attr:`per_process`, credited); one that left keeps its part of the
        last PSS reading (an overestimate, on the safe side). The credit lapses once a PSS
        reading finds the members the one before it measured (the start-up is over: a leak
        after it is extrapolated at once), and never exceeds the prediction for the members
        there are."""
        if self._last is not None:
            joined = rss.keys() - self._rss.keys()
            left = self._rss.keys() - rss.keys()
            self._shared += sum(rss[p] for p in joined) - sum(self._rss[p] for p in left)
            credit = self._credit + len(joined) * self.per_process
            self._credit = min(credit, len(rss) * self.per_process)
        self._rss = dict(rss)

    def _unpredicted(self, growth: int) -> int:
        """The part of ``growth`` beyond what is still predicted for the start-up."""
        if growth <= 0:
            return 0
        spent = min(growth, self._credit)
        self._credit -= spent
        return growth - spent

    def _pss_due(self, now: float, rss: int, pids: frozenset[int]) -> bool:
        """Read PSS when the members changed (a worker's shared pages), else now and then.

        While summed RSS (never below PSS) is under half the budget the tree is safe whatever
        its PSS, so readings there are for the record only and are paced by their own cost:
        at most :data:`PSS_CPU_SHARE` of a core (a reading of a PyTorch process with four
        workers takes tens of milliseconds, and the machine's CPUs are what is measured)."""
        far = rss <= self.budget / 2
        if far and self.pss_far_s is None:
            return False  # PSS <= RSS: far from the budget whatever PSS is
        if far and now - self._pss_at < self._pss_cost / PSS_CPU_SHARE:
            return False
        if pids != self._pids:
            return True
        near = self.estimate > self.budget / 2
        return now - self._pss_at >= (PSS_NEAR_S if near else (self.pss_far_s or PSS_NEAR_S))

    def _interval(self, rate: float) -> float:
        """Sooner the closer the budget is, in time at the current growth and in bytes."""
        headroom = max(self.budget - self.estimate, 0)
        wait = SLOW_S if self.estimate < self.budget / 2 else SLOW_S / 5
        wait = min(wait, headroom / UNSEEN_RATE)
        if rate > 0:
            wait = min(wait, headroom / rate / 4)
        return max(wait, FAST_S)


def _bytes(mb: float) -> int:
    return round(mb * 2**20)


_listener: tuple[int, Callable[[int], None]] | None = None  # (the trial's pid, its guard)


def listen_for_workers(listener: Callable[[int], None] | None) -> None:
    """Send what :func:`expect_workers` tells in this process (not in the processes it forks)
    to ``listener``: the trial's own guard, or the line to the sweep's. None: to nobody."""
    global _listener
    _listener = None if listener is None else (os.getpid(), listener)


def expect_workers(batch: Batch | None, prefetch_factor: int | None) -> None:
    """Tell the trial's memory guard, before any worker starts, what each process that joins
    the trial's tree will hold (:func:`loadertune.checks._preflight.worker_mb` of ``batch``), so
    their start-up is not taken for a leak. Nothing without a guard, nor in a rank: the trial
    process tells it for every rank of the node (each rank starts workers of the same settings)."""
    if _listener is not None and _listener[0] == os.getpid():
        _listener[1](_bytes(worker_mb(batch, prefetch_factor)))


def footprint_reader(monitor: ProcessTreeMonitor) -> Callable[[], int]:
    """The tree's summed PSS (or USS/RSS where the OS lacks it), read through ``monitor``."""

    def read() -> int:
        sample = monitor.sample(memory=True)
        return 0 if sample is None or sample.memory_bytes is None else sample.memory_bytes

    return read


def over_budget_text(peak: int, budget: int, key: str) -> str:
    """One line: what the tree reached, the budget, and how to fix it."""
    return (
        f"the trial's processes reached {peak / 2**20:.0f} MB (PSS) and were stopped before "
        f"passing the memory budget of {budget / 2**20:.0f} MB; lower loader.batch_size, "
        f"loader.num_workers or loader.prefetch_factor, or raise {key}"
    )


class TrialMemoryWatch:
    """A thread in the trial process that samples its tree and calls ``on_over`` once when
    the tree would pass ``budget`` bytes; a few readings a second far from the budget, so it
    takes next to nothing from the loop it guards.
    """

    def __init__(self, budget: int, on_over: Callable[[str], None]) -> None:
        self.pacer = BudgetPacer(budget, pss_far_s=None)  # no PSS far from it: costly here
        self.on_over = on_over
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loadertune-memory", daemon=True)

    def __enter__(self) -> TrialMemoryWatch:
        listen_for_workers(self.pacer.expect_workers)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        listen_for_workers(None)
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        monitor = ProcessTreeMonitor(os.getpid())
        read_pss = footprint_reader(monitor)
        while not self._stop.wait(self.pacer.next_in):
            if self.pacer.observe(time.perf_counter(), monitor.rss_by_pid(), read_pss):
                self.on_over(
                    over_budget_text(self.pacer.peak, self.pacer.budget, "trial.memory_budget_mb")
                )
                return
