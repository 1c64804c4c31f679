"""A probe handing over: its segment is booked, its look-ahead still arriving.

In one process, a segment is booked with the tuner when its loader would be handed no more
batches, so the tuner names the next segment while the look-ahead is still in flight: the
tail. Its cycles are still the segment's, booked as a drained segment's were (steady while
every worker still has a batch in flight). When the next segment runs the same setting, or
the tuning is over, the loader stays fed through the tail: the next segment, or the
decision, comes once the tail's cycles are booked, on the same iterator, nothing drained or
refilled (the setting chosen goes on). When another setting is next, the tail is drained:
its batches arrive first, in the epoch's order, and the next probe starts as soon as the
tail's next cycle is no longer steady (a cycle it starts in is not counted), so its first
loads overlap the tail's last batches instead of following them. Before, every switch
drained the pipeline and refilled it: about one batch's load time each (35-45 ms a switch
on the benchmark's io loop, 2026-12-07).

Under ``torch.distributed`` the segment keeps its drain inside it (:mod:`._driver`): a probe
failing on one rank must be dropped by every rank at the same step, which the tuning step's
agreement covers for the segment's probe only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from loadertune.autoloader._probe import Probe, ProbeFault, tree_usage
from loadertune.autoloader._schedule import Measure, Segment, Setting, Tuner
from loadertune.autoloader._usage import queued, read_usage
from loadertune.machine import Sched


@dataclass
class Tail:
    """The old probe's batches in flight, booked to its segment as they arrive."""

    probe: Probe
    measure: Measure
    cpu0: float  # the process tree's CPU seconds at the segment's start
    sched0: dict[int, Sched]  # run-queue figures at the segment's first steady cycle
    drained: bool = False  # handed no more batches (another setting is next), or still fed

    @property
    def outstanding(self) -> int:
        """Batches handed to the old probe and not yet delivered."""
        return self.probe.sampler.outstanding

    @property
    def steady(self) -> bool:
        """Whether the cycle just delivered showed the setting's pace: every worker still had
        a batch in flight (as for a segment's own drain)."""
        return self.outstanding >= max(self.probe.setting.num_workers, 1)

    @property
    def steady_next(self) -> bool:
        """Whether the next cycle will be steady too: the next probe starts once it is not,
        so its start and its first loads fall in cycles this segment does not count."""
        return self.outstanding > max(self.probe.setting.num_workers, 1)

    def book(self, wait: float, wait_cpu: float, step: float, step_cpu: float) -> None:
        """Add one delivered cycle to the old segment's figures."""
        self.measure.add_cycle(wait, wait_cpu, step, step_cpu, self.steady)

    def finish(self) -> float:
        """The tail arrived: the segment's CPU time, memory and run-queue wait to its end;
        the tree's CPU seconds read there (where a next segment on the same pool starts)."""
        pids = self.probe.worker_pids()
        cpu = read_usage(self.measure, pids, self.cpu0)
        self.measure.queued_s = queued(self.sched0, pids)
        return cpu


class HandOver:
    """The driver's switches between segments in one process (:class:`._driver.Driver`)."""

    tuner: Tuner
    pools: dict[Setting, Probe]
    probe: Probe | None
    leaving: Tail | None
    segment: Segment | None
    measure: Measure | None
    settled: Setting | None
    _start_ahead: bool
    _cpu0: float
    _sched0: dict[int, Sched]

    if TYPE_CHECKING:  # the driver's own

        def _pids(self) -> list[int]: ...
        def _begin(self, seg: Segment) -> None: ...
        def _settle(self, keep: Probe | None = None) -> None: ...
        def _live_probe(self) -> Probe: ...
        def _fault(self, why: str) -> None: ...

    def _hand_over(self) -> None:
        """One process (:mod:`._tail`): book the segment while its look-ahead is in flight.
        The next segment on the same setting, or settling, waits for that tail on the same
        iterator (nothing drained or refilled); another setting's probe starts while the
        drained tail arrives."""
        m, seg, probe = self.measure, self.segment, self.probe
        assert m is not None and seg is not None and probe is not None
        tail = Tail(probe, m, self._cpu0, self._sched0)  # its CPU and memory read at its end
        self.tuner.done(seg, m)  # the tail's cycles are added to ``m`` as they arrive
        self.tuner.to_come = tail.outstanding
        self.segment = self.measure = None
        nxt = self.tuner.next()
        if nxt is not None:
            self._begin(nxt)
        if nxt is None or nxt.setting == probe.setting:
            self.probe, self.leaving = probe, tail  # the next segment's CPU from its end
        else:
            self._cpu0 = tree_usage(self._pids())[0]
            self._drain_to_live(tail)

    def _drain_to_live(self, tail: Tail) -> None:
        """Hand the tail's probe no more batches; the live probe starts as the tail ends."""
        tail.drained = True
        tail.probe.drain()
        self.leaving = tail
        self._start_ahead = not tail.steady_next

    def _count_tail(
        self, tail: Tail, wait: float, wait_cpu: float, step: float, step_cpu: float
    ) -> None:
        """Book a cycle of the tail to its segment (unless settled: decided without it); a
        tail still fed ends with its look-ahead, a drained one starts the live probe once its
        next cycle is no longer steady."""
        if self.settled is None:
            tail.book(wait, wait_cpu, step, step_cpu)
            self.tuner.to_come = max(0, self.tuner.to_come - 1)
        if not tail.drained:
            if self.tuner.to_come == 0:
                self._end_tail()
        elif not tail.steady_next:
            self._start_ahead = True

    def _start_live_ahead(self) -> None:
        """Start the live probe while the tail arrives; a probe failing to start is dropped
        as one failing in its segment is."""
        if not self._start_ahead:
            return
        self._start_ahead = False
        if self.probe is not None and self.probe.running:
            return
        try:
            self._live_probe()
        except ProbeFault as fault:
            self._fault(str(fault))

    def _end_tail(self) -> None:
        """The tail arrived: its segment's figures to its end. A drained tail's pool closes
        unless a later round needs it; after a fed one the next segment starts on the same
        iterator, or the decision is made (another setting chosen: this one drains first)."""
        tail, self.leaving = self.leaving, None
        assert tail is not None
        self.tuner.to_come = 0
        cpu = tail.finish() if self.settled is None else None
        if tail.drained:
            if self.settled is not None and tail.probe.setting != self.settled:
                self.pools.pop(tail.probe.setting, None)
                tail.probe.close()
            return
        if self.segment is not None:  # the next segment starts here, on the same pool
            assert cpu is not None  # a segment runs only before settling
            self._cpu0 = cpu
            return
        self._settle(keep=tail.probe)
        if self.probe is not tail.probe:
            self._drain_to_live(tail)

    def _tail_fault(self, why: str) -> None:
        """The tail's probe failed: a live probe gives back what it was handed (the tail's
        batches go before them), the failed one is closed and dropped; a segment begun on
        the same setting is a failed one, its steps run on the last setting that worked."""
        tail, self.leaving = self.leaving, None
        assert tail is not None
        failed = tail.probe
        if self.probe is not None and self.probe is not failed and self.probe.running:
            self.probe.abandon()
        failed.close(kill=True)  # its batches go back to the front of the plan
        self.pools.pop(failed.setting, None)
        self.tuner.to_come = 0
        if self.probe is failed:
            self.probe = None
        if self.settled is not None:
            return
        tail.measure.failed = why
        self.tuner.dropped[failed.setting] = why
        seg = self.segment
        if seg is not None and seg.setting == failed.setting:
            self.tuner.fail(seg, Measure(seg.setting, seg.round, failed=why), seg.steps)
            self.segment = self.measure = None
