"""The tuning loop inside the user's training loop: time each step, switch probes, settle.

The time spent inside ``next()`` is the wait, the time between two batches the user's step;
together, one cycle of the training loop. Each segment runs one setting for a number of
steps, then stops handing it batches and delivers what it has in flight (no loaded batch is
thrown away); its workers stay alive, idle, so its next round restarts them instead of
forking new ones. In one process the segment is booked as that look-ahead starts to arrive
(:mod:`._tail`): the same setting next goes on on its iterator, another starts loading
while the look-ahead arrives. A start-up (the first fork, or a restart) is booked to the
segment that pays it. Only a failed probe is closed mid-flight: its undelivered batches go
back to the plan. At settling, every pool but the chosen one is closed.

Under ``torch.distributed`` (:mod:`._world`) every rank runs the same segments over the same
steps: the tuner's state machine is fed the same figures on every rank (at a segment's end,
the slowest rank's), a probe that fails on any rank is dropped by all of them at the same
step (one all-reduce per tuning step says whether one did), and rank 0's decision is
broadcast. A rank whose probe fails fetches that step's batch from the last setting that
worked, so the step goes on as on the others; the tuner hears of the failure only once every
rank knows it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from loadertune.autoloader._decision import Decision, decide
from loadertune.autoloader._plan import IndexPlan, PlanSampler
from loadertune.autoloader._probe import Probe, ProbeFault, tree_usage
from loadertune.autoloader._schedule import Measure, Segment, Setting, Tuner
from loadertune.autoloader._slowest import slowest
from loadertune.autoloader._tail import HandOver, Tail
from loadertune.autoloader._usage import memory_read_due, queued, read_usage, sched_now
from loadertune.autoloader._world import World
from loadertune.config import in_flight
from loadertune.machine import Sched, usable_cpus

if TYPE_CHECKING:
    from torch.utils.data import DataLoader, Dataset


class Driver(HandOver):
    """Runs the epochs: the plan, the tuner, the live probe and its measure."""

    def __init__(
        self,
        dataset: Dataset[Any],
        plan: IndexPlan,
        tuner: Tuner,
        build: Callable[[Setting, PlanSampler, float], DataLoader[Any]],
        clock: Callable[[], float],
        probe_timeout_s: float,
        memory_limit_mb: float,
        on_settle: Callable[[Decision], None],
        world: World | None = None,
    ) -> None:
        self.dataset, self.plan, self.tuner, self.build = dataset, plan, tuner, build
        self.clock, self.probe_timeout_s, self.memory_limit_mb = (
            clock,
            probe_timeout_s,
            memory_limit_mb,
        )
        self.on_settle = on_settle
        self.world = world or World()
        self._faulted = ""  # why this rank's probe failed in this step, until every rank knows
        self._checked = False  # the ranks were found to tune alike
        self.user_timeout_s = 0.0  # the DataLoader ``timeout`` the user passed
        self.probe: Probe | None = None  # the one fetched from now
        self.pools: dict[Setting, Probe] = {}  # every probe whose workers are alive
        self.draining = False  # the segment's steps are done: its look-ahead is delivered
        self.leaving: Tail | None = None  # a booked probe's batches in flight, delivered first
        self._start_ahead = False  # start the live probe now: its loads overlap the tail's
        self.segment: Segment | None = None
        self.measure: Measure | None = None
        self.settled: Setting | None = None
        self.decision: Decision | None = None
        self._since_start = 0  # batches since the live iterator started
        self._cpu0 = 0.0
        self._sched0: dict[int, Sched] = {}  # run-queue figures at the segment's start
        self._pending: tuple[float, float, float, float, Tail | None] | None = None  # out

    def begin_epoch(self, resume: bool) -> None:
        """Start an epoch (or, after a checkpoint, continue the one it was taken in)."""
        if not resume:
            self.plan.begin_epoch()
        for pool in self.pools.values():
            pool.end_epoch()  # a previous epoch may have been abandoned mid-way
        self._pending = None

    def next_batch(self) -> Any:
        """The epoch's next batch, each index exactly once, timing the loop as it runs.

        The wait is the time in here; the user's step, the time until the next call. An
        error the dataset raised for one batch propagates with that batch spent, and the
        epoch goes on at the next call.

        Raises:
            StopIteration: every batch of the epoch was delivered.
        """
        if self._pending is not None:
            wait, wait_cpu, t1, c1, tail = self._pending
            self._pending = None
            cycle = (wait, wait_cpu, self.clock() - t1, time.process_time() - c1)
            self._count_tail(tail, *cycle) if tail else self._count(*cycle)
        while not self.plan.done:
            tail = self.leaving
            try:
                self._start_live_ahead()
                probe = tail.probe if tail else self._live_probe()
                t0, c0 = self.clock(), time.process_time()
                batch = probe.next()
            except StopIteration as stop:
                if tail is not None:
                    self._end_tail()
                    continue
                if self.draining:
                    self._end_segment()
                    continue
                if not self.plan.done:
                    raise RuntimeError("AutoLoader: the loader stopped mid-epoch") from stop
                break
            except ProbeFault as fault:
                self._tail_fault(str(fault)) if tail else self._fault(str(fault))
                continue
            wait, wait_cpu = self.clock() - t0, time.process_time() - c0
            self._pending = (wait, wait_cpu, self.clock(), time.process_time(), tail)
            return batch
        self.leave_epoch()
        raise StopIteration

    def leave_epoch(self) -> None:
        """The epoch ended, or was left before its end: a draining segment is booked with what
        it measured (the last step, if the loop never came back for another batch, is not),
        and the pools forget what they were handed."""
        self._pending = None
        while self.leaving is not None:  # a fed tail may hand over to a drained one
            self._end_tail()
        if self.draining:
            self._end_segment()
        for pool in self.pools.values():
            pool.end_epoch()

    def _live_probe(self) -> Probe:
        """The probe to fetch from: the segment's (its pool reused) or the settled one."""
        if self.settled is None and self.segment is None:
            self._next_segment()
        if self.probe is None:
            setting = self.settled or self._segment_setting()
            if self._faulted:  # this step's batch, from the last setting that worked
                setting = self.tuner.last_good()
            t0 = self.clock()
            self.probe = self.pools.get(setting) or Probe(
                self.dataset, setting, self.plan, self.build, self._hang_limit(),
                self.user_timeout_s,
            )  # fmt: skip
            self.pools[setting] = self.probe
            self._add_startup(self.clock() - t0)
        if not self.probe.running:
            t0 = self.clock()
            self.probe.start(guarded=self.settled is None)
            self._since_start = 0
            self._add_startup(self.clock() - t0)
        return self.probe

    def _hang_limit(self) -> float:
        """A probe's batch later than this is hung: the limit, or 20 x the measured load."""
        g = self.tuner.guess
        return max(self.probe_timeout_s, 20 * g.load_ms / 1000) if g else self.probe_timeout_s

    def _segment_setting(self) -> Setting:
        assert self.segment is not None
        return self.segment.setting

    def _add_startup(self, seconds: float) -> None:
        if self.measure is not None:
            self.measure.startup_s += seconds

    def _next_segment(self) -> None:
        """Move to the tuner's next segment (its pool, if it ran before), or settle."""
        seg = self.tuner.next()
        if seg is None:
            self._settle()
            return
        self._begin(seg)
        self._cpu0 = tree_usage(self._pids())[0]

    def _begin(self, seg: Segment) -> None:
        """Make ``seg`` the live segment, on its setting's pool if it has one (its CPU time is
        counted from where the caller reads it: now, or where a tail on its pool ends)."""
        self.segment, self.measure = seg, Measure(seg.setting, seg.round)
        self.probe = self.pools.get(seg.setting)
        self._sched0 = {}

    def _count(self, wait: float, wait_cpu: float, step: float, step_cpu: float) -> None:
        """Book one cycle; drain the probe's look-ahead, then end the segment, at its steps."""
        self._since_start += 1
        m, seg = self.measure, self.segment
        if self.settled is not None or m is None or seg is None:
            return
        if not self._checked:
            self._check_ranks()
        why, self._faulted = self.world.agree(self._faulted), ""
        if why:  # this step's batch came from the failed probe or, where it failed, the fallback
            self._drop(why)
            return
        s = seg.setting
        steady = self._steady(s.num_workers)
        if steady and not m.counted:  # the run queue from here: the start-up is the switch's
            self._sched0 = sched_now(self._pids())
        m.add_cycle(wait, wait_cpu, step, step_cpu, steady)
        if memory_read_due(m.steps, s.num_workers):
            self._read_usage(m)
            over = m.peak_rss_mb > self.memory_limit_mb and s.num_workers
            limit = f"memory {m.peak_rss_mb:.0f} MB over the {self.memory_limit_mb:.0f} MB limit"
            why = self.world.agree(limit if over else "")
            if why:
                self._drop(why)
                return
        lookahead = in_flight(s.num_workers, s.prefetch_factor)
        if not self.draining and m.steps >= max(seg.steps - lookahead, s.num_workers + 2):
            if not lookahead or self.probe is None:
                self._end_segment()
            elif self.world.size > 1:  # the look-ahead is delivered inside the segment
                self.probe.drain()  # its batches in flight are delivered, none wasted
                self.draining = True
            else:
                self._hand_over()

    def _check_ranks(self) -> None:
        """At the first tuning step: every rank runs the same schedule, or all stop saying so."""
        t = self.tuner
        plan = (t.budget, t.max_workers, t.cpus, t.fixed, t.forced, len(self.plan.batches))
        what = "tune_steps, max_workers, CPUs, fixed settings, candidates or batches per epoch"
        self.world.check_same(what, plan)
        self._checked = True

    def _steady(self, workers: int) -> bool:
        """Whether the cycle just booked shows the setting's steady pace: past the burst of
        the workers' first batches (which loaded together while they started) and, while
        draining, with a batch still in flight for every worker."""
        if self._since_start <= max(workers, 1):
            return False
        outstanding = self.probe.sampler.outstanding if self.probe else 0
        return not self.draining or outstanding >= workers

    def _end_segment(self) -> None:
        """Book the segment; its probe's workers stay, idle, for its next round."""
        m, seg = self.measure, self.segment
        assert m is not None and seg is not None
        self._read_usage(m)
        m.queued_s = self._queued()
        self.tuner.done(seg, slowest(self.world.gather(m)))
        self.segment = self.measure = self.probe = None
        self.draining = False

    def _read_usage(self, m: Measure) -> None:
        read_usage(m, self._pids(), self._cpu0)

    def _pids(self) -> list[int]:
        return self.probe.worker_pids() if self.probe else []

    def _queued(self) -> float | None:
        return queued(self._sched0, self._pids())

    def _fault(self, why: str) -> None:
        """This rank's probe failed fetching a batch: close it now (its batches go back to the
        plan); the step's batch comes from the last setting that worked, and every rank drops
        the probe when the step is counted."""
        assert self.probe is not None
        failed, self.probe, self.draining = self.probe, None, False
        failed.close(kill=True)
        self.pools.pop(failed.setting, None)
        if self.settled is not None or self.segment is None:
            raise RuntimeError(f"AutoLoader: the settled loader failed: {why}")
        if self._faulted:
            raise RuntimeError(
                f"AutoLoader: a probe failed ({self._faulted}), then the last setting that "
                f"worked: {why}"
            )
        self._faulted = why

    def _drop(self, why: str) -> None:
        """The segment's probe failed (on any rank): close it where it is open, and run the
        rest of its steps on the last setting that worked."""
        m, seg = self.measure, self.segment
        assert m is not None and seg is not None
        failed = self.pools.pop(seg.setting, None)
        if failed is not None:
            failed.close(kill=True)  # its batches go back to the plan
        fallback = self.probe if self.probe is not failed else None  # where it failed
        self.probe, self.draining = None, False
        m.failed = why
        steps_left = seg.steps - m.steps
        self.tuner.fail(seg, m, steps_left)
        self.segment = self.measure = None
        if fallback is not None and steps_left <= 0:  # no recovery segment to carry it on
            self.pools.pop(fallback.setting, None)
            fallback.close()

    def _settle(self, keep: Probe | None = None) -> None:
        """Keep the chosen setting for the rest of training, close the other pools (``keep``,
        a probe whose tail is still arriving, closes after it), record."""
        cpus = usable_cpus()  # the node's: the figures hold every rank's CPU time
        for setting, pool in list(self.pools.items()):  # one whose workers died idle is out
            why = self.world.agree(pool.lost_workers())
            if why:
                self.pools.pop(setting).close(kill=True)
                self.tuner.dropped[setting] = why
        decision = self.world.from_root(lambda: decide(self.tuner, cpus))
        self.decision, self.settled = decision, decision.chosen
        for setting in [s for s in self.pools if s != decision.chosen]:
            if keep is None or setting != keep.setting:
                self.pools.pop(setting).close()
        self.probe = self.pools.get(decision.chosen)
        if self.probe is not None:
            self.probe.unguard(self.user_timeout_s)
        self.on_settle(decision)

    def close(self) -> None:
        """Stop every pool's workers; undelivered batches go back to the plan."""
        for pool in self.pools.values():
            pool.close()
        self.pools, self.probe, self.draining, self.leaving = {}, None, False, None

    def resume_settled(self, setting: Setting, decision: Decision | None) -> None:
        """After a checkpoint: no tuning, the saved choice from the first batch."""
        self.settled, self.decision = setting, decision
