"""One rank of a node's trial: its process group, its loader over its share, its timed window.

The launcher starts :func:`rank_main` in every rank with ``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE`` set. Each rank builds the trial's workload on the
dataset the trial process made, paces its step across the group (:mod:`.pacing`), warms up,
waits at a barrier so every window opens together, and times steps until every rank's rate
is known (or one rank's time runs out): the decision to stop is an all-reduce after each
step, so all ranks run the same steps. Rank 0 also samples the whole trial's process tree
and sends the node's steps to the trial process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
import warnings
from datetime import timedelta
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from loadertune.config import RunConfig, TrialConfig
from loadertune.datasets.iterable import stream_figures, unwrapped
from loadertune.guards import die_with_parent
from loadertune.loader import (
    StepLoop,
    build_loader,
    build_workload,
    resolve_device,
    stop_rule,
    synchronizer,
)
from loadertune.machine import InterferenceMeter, TreeSampler
from loadertune.measure import (
    GpuMonitor,
    StepRecord,
    StepTimer,
    copy_figures,
    copy_timer,
    warmup_steps,
)
from loadertune.models import samples_in
from loadertune.ranks.board import Board, StepForwarder
from loadertune.ranks.node import RankReport
from loadertune.ranks.pacing import distribute

COLLECTIVE_MARGIN_S = 60.0  # a collective waits this much past the hang limit before failing
CAUSE_LOOK_S = 0.5  # how long a failing rank looks for an earlier failure before it exits
FOLLOW_HOLD_S = 5.0  # the most a follower holds its exit for the launcher to collect the cause


@dataclasses.dataclass
class _Link:
    """This rank's place in the node, and its lines to the trial process."""

    rank: int
    world: int
    board: Board
    steps: StepForwarder
    trial_pid: int
    device: Any

    def beat(self) -> None:
        self.board.beat(self.rank)

    def wait(self) -> None:
        """This rank's own work is done; it now waits for the others (a collective)."""
        self.board.waiting(self.rank)

    def forward(self, record: StepRecord, timed: bool) -> None:
        """Rank 0 sends the node's step (its own timing, the node's samples)."""
        if self.rank == 0:
            self.steps.send(record, timed)

    def agree(self, samples: int, unsure: bool, late: bool, reopened: bool) -> _Votes:
        """The node's count of this step's votes, one all-reduce for all of them."""
        votes = torch.tensor([samples, unsure, late, reopened], dtype=torch.float64)
        votes = votes.to(self.device)
        self.wait()
        dist.all_reduce(votes)
        return _Votes(*(int(v) for v in votes.tolist()))


class _Votes(NamedTuple):
    """One step, counted over the node."""

    samples: int  # the node's samples in the step
    unsure: int  # ranks not yet sure of their rate
    late: int  # ranks out of time
    reopened: int  # ranks whose iterable's pass ended in the step (the next opened)


class _BeatTimer(StepTimer):
    """A step timer that beats on the board at every phase of the step."""

    def __init__(self, beat: Any) -> None:
        super().__init__()
        self._beat = beat

    def start(self) -> None:
        super().start()
        self._beat()

    def batch_ready(self) -> None:
        super().batch_ready()
        self._beat()

    def copied(self) -> None:
        super().copied()
        self._beat()


def rank_device(name: str, local_rank: int) -> Any:
    """The rank's device: ``cuda:<local_rank>`` where the trial runs on CUDA, else as named."""

    device = torch.device(resolve_device(name))
    return torch.device("cuda", local_rank) if device.type == "cuda" else device


@record
def rank_main(
    config: RunConfig,
    store: Any,
    dataset: Any,
    board: Board,
    steps: StepForwarder,
    trial_pid: int,
    hang_s: float,
) -> RankReport:
    """One rank, start to end; what it raises the launcher reports with the rank's number.

    First of all the rank dies with the trial process, its parent (:mod:`.worker_tether`):
    killed, the trial could not stop it, and it would run on with its workers, holding the
    sweep's pipes and output open. A rank whose parent is already gone ends at once.
    """
    if not die_with_parent(trial_pid):
        os._exit(1)  # the trial process died while this rank started: nobody waits for it
    rank = int(os.environ["RANK"])
    # Forked from the launcher, the rank has its handlers: the launcher's SIGTERM must end a
    # rank blocked in a collective at once; Ctrl-C is the trial process's to handle.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        board.started(rank)
        device = rank_device(config.trial.device, int(os.environ["LOCAL_RANK"]))
        link = _Link(rank, int(os.environ["WORLD_SIZE"]), board, steps, trial_pid, device)
        return _run_rank(config, store, dataset, link, hang_s)
    except BaseException:
        board.failed(rank)
        _follow(board, rank)
        raise


def _follow(board: Board, rank: int) -> None:
    """A rank that fails after another (on the group the other broke) holds its exit until the
    launcher's agent has collected the other's, so the launcher reports the cause.

    The agent polls its ranks every ``monitor_interval`` (0.1 s) and reports the first exited
    rank it finds; a rank that dies takes its sockets with it, and the others' collectives
    fail at once, so without the hold a loaded machine often shows the agent a follower's
    error beside the cause's exit. The cause itself finds no earlier failure and exits after
    looking for ``CAUSE_LOOK_S``; the agent then stops the followers (SIGTERM) as it would.
    """
    deadline = time.monotonic() + CAUSE_LOOK_S
    while (cause := board.failed_before(rank)) is None:
        if time.monotonic() >= deadline:
            return
        time.sleep(0.02)
    deadline = time.monotonic() + FOLLOW_HOLD_S
    while not board.reaped(cause) and time.monotonic() < deadline:
        time.sleep(0.02)


def _run_rank(
    config: RunConfig, store: Any, dataset: Any, link: _Link, hang_s: float
) -> RankReport:
    tc = config.trial
    threads = os.environ.get("OMP_NUM_THREADS")
    if tc.torch_threads is None and threads and threads.isdigit():
        torch.set_num_threads(int(threads))  # forked: the environment came too late for torch
    device = link.device
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.set_device(device)
    timeout = timedelta(seconds=hang_s + COLLECTIVE_MARGIN_S)
    dist.init_process_group("nccl" if cuda else "gloo", timeout=timeout)
    # On an error the group is left to this process's exit: destroyed first, it would fail
    # the other ranks' collectives before this rank's error is written (rank_main stamps it),
    # and the launcher would find them failed first and name one of them as the cause.
    cfg = dataclasses.replace(config, trial=dataclasses.replace(tc, device=str(device)))
    workload = build_workload(cfg, store, unwrapped(dataset))  # its own worker tally
    workload.step_fn = _paced(workload.step_fn, device, link)
    copies = copy_timer(device, synchronizer(device))
    gpu = GpuMonitor(device, tc.sample_hz) if cuda else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = _measure(tc, workload, store, copies, gpu, link)
    seen = {str(w.message) for w in caught} | set(gpu.warnings if gpu else [])
    report.warnings = sorted(seen)
    report.accelerator |= copy_figures(copies) if cuda else {}
    with contextlib.suppress(Exception):
        dist.destroy_process_group()
    return report


def _paced(step: Any, device: Any, link: _Link) -> Any:
    return distribute(step, device, link.wait)


@dataclasses.dataclass
class _Window:
    """The timed window as this rank saw it; the tree's figures on rank 0 only."""

    timer: StepTimer
    node: list[StepRecord]
    truncated: bool
    start: float
    end: float
    tree: dict[str, Any] = dataclasses.field(default_factory=dict)


def _measure(
    tc: TrialConfig, workload: Any, store: Any, copies: Any, gpu: Any, link: _Link
) -> RankReport:
    """First batch, warm-up, the barrier, then the window; rank 0 samples the whole tree."""

    eff = workload.effective
    warmup = warmup_steps(tc.warmup_steps, eff.num_workers, eff.prefetch_factor)
    rule = stop_rule(tc, eff.num_workers)
    loader = build_loader(tc, workload, warmup, rule.max_steps, link.rank, link.world)
    sampler = TreeSampler(tc.sample_hz, link.trial_pid) if link.rank == 0 else None
    with sampler or contextlib.nullcontext():
        step = workload.step_fn
        loop = StepLoop(loader, link.device, eff.non_blocking, step, copies, samples_in)
        measure_start = time.perf_counter()
        link.beat()
        first_batch_s = loop.first_batch(_BeatTimer(link.beat))
        for _ in range(warmup):
            record = loop.step(_BeatTimer(link.beat))
            link.forward(dataclasses.replace(record, samples=record.samples * link.world), False)
        link.wait()
        dist.barrier()
        window = _window(tc, rule, loop, store, gpu, link, sampler)
        loop.close()
    streaming, idle = stream_figures(loader.dataset, loop.reopened, eff.num_workers)
    return RankReport(
        streaming=streaming,
        idle_workers=idle,
        rank=link.rank,
        records=window.timer.records,
        first_batch_s=first_batch_s,
        warmup=warmup,
        epochs=loop.epochs,
        measure_start=measure_start,
        window_start=window.start,
        window_end=window.end,
        truncated=window.truncated,
        torch_threads=torch.get_num_threads(),
        effective=eff,
        device=str(link.device),
        start_method=workload.start_method,
        node_records=window.node if link.rank == 0 else [],
        **window.tree,
    )


def _window(
    tc: TrialConfig, rule: Any, loop: Any, store: Any, gpu: Any, link: _Link, sampler: Any
) -> _Window:
    """The timed window; rank 0 reads the whole tree's CPU and other work over it."""

    meter = InterferenceMeter(link.trial_pid) if link.rank == 0 else None
    loop.copies.reset()
    if meter is not None:
        store.window_started()
        meter.start()
    if gpu is not None:
        gpu.start()
    start = time.perf_counter()
    timer, node, truncated = _time_steps(loop, rule, start + tc.time_limit_s, link)
    end = time.perf_counter()
    window = _Window(timer, node, truncated, start, end)
    window.tree["accelerator"] = gpu.stop() if gpu is not None else {}
    if meter is not None:
        window.tree["interference"] = meter.stop()
        store.window_ended(end - start)
        samples = sampler.stop()  # its last sample sees the workers, still alive
        window.tree |= {
            "resources": samples.samples,
            "memory_metric": samples.memory_metric,
            "cpu_s": meter.tree_cpu_s - meter.cpu_s_by_pid.get(sampler.pid or -1, 0.0),
            "storage": dict(store.figures),
        }
    return window


def _time_steps(
    loop: Any, rule: Any, deadline: float, link: _Link
) -> tuple[StepTimer, list[StepRecord], bool]:
    """Timed steps until every rank is sure of its rate, or one rank is out of time.

    The checks fall on the same step counts on every rank, and the verdict is an all-reduce,
    so every rank stops after the same step. A step in which any rank's iterable ended a
    pass leaves every rank's window (:meth:`StepLoop.discard`), so the ranks' windows keep
    the same steps. Returns the timer, the node's steps (this rank's timing, every rank's
    samples) and whether time ran out.
    """
    timer = _BeatTimer(link.beat)
    node: list[StepRecord] = []
    check_at = rule.min_steps
    while True:
        epochs = loop.epochs
        record = loop.step(timer)
        steps = len(timer.records)
        at_check = steps >= check_at
        unsure = not (at_check and rule.sure(timer.records))
        late = time.perf_counter() > deadline
        votes = link.agree(record.samples, unsure, late, loop.epochs != epochs)
        if votes.reopened:  # a pass ended on some rank: the step leaves every rank's window
            loop.discard(timer)
            link.forward(dataclasses.replace(record, samples=votes.samples), False)
        else:
            node.append(dataclasses.replace(record, samples=votes.samples))
            link.forward(node[-1], True)
            if at_check:
                if votes.unsure == 0:
                    return timer, node, False
                check_at = rule.next_check(steps)
        if votes.late:
            return timer, node, True
