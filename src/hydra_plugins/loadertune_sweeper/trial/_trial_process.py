"""Run one trial in a child process and follow it from the sweep process.

The child runs the app's task function through Hydra's ``run_job`` (so each trial has its
job directory, ``.hydra/`` files and ``hydra.job.num`` as with any launcher) in a process
group of its own, and streams each step back over a pipe. The parent keeps every step as it
arrives, so a trial the kernel kills is still recorded with what it measured. It asks the
pruner every ``report_every`` timed steps, samples the child's process tree against the
memory budget, and kills the whole group (the trial and its DataLoader workers) when the
trial is pruned, over budget, stalled or over its wall-clock limit. Afterwards it checks that
nothing of the trial survived: no process of its group, no ``torch_*`` file in /dev/shm.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import psutil
from hydra.core.utils import JobStatus, run_job
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from loadertune._hydra_private import job_error
from loadertune.guards import BudgetPacer, die_with_parent, footprint_reader, listen_for_workers
from loadertune.machine import Interference, InterferenceMeter, ProcessTreeMonitor
from loadertune.measure import StepRecord
from loadertune.record import MessageKind, Reason, TrialResult, TrialStatus, classify, classify_exit
from loadertune.record import _channel as channel
from loadertune.storage import remove_stale_scratch

from ._group import SHM, ended, exited, group_members, kill_group, oom_kills, shm_files, shm_owner
from ._stall_watch import StallWatch

# Decides after a batch of timed steps whether to stop the trial (True: prune it).
ProgressHook = Callable[[list[StepRecord]], bool]


@dataclass(frozen=True)
class Limits:
    """What the sweep process enforces on a trial."""

    wall_s: float  # from start to exit
    stall_s: float  # longest silence between two steps before the trial counts as hung
    startup_s: float  # longest wait for the first step (set-up, worker start, first batch)
    memory_bytes: int  # process-tree PSS budget


@dataclass
class TrialOutcome:
    """How a trial's process ended, with everything it sent before."""

    status: TrialStatus = TrialStatus.FAILED  # equal to "complete", "pruned" or "failed"
    result: TrialResult | None = None
    steps: list[StepRecord] = field(default_factory=list)
    reason: str | None = None
    error: str | None = None
    exitcode: int | None = None
    wall_s: float = 0.0
    peak_memory_bytes: int = 0
    leaked_processes: int = 0
    shm_files_removed: int = 0
    oom_kills: int = 0
    pids: set[int] = field(default_factory=set)  # the trial's processes, as seen while it ran
    interference: Interference | None = None  # other work over a pruned trial's timed steps


def run_trial_process(
    hydra_context: HydraContext,
    task_function: TaskFunction,
    job_cfg: DictConfig,
    on_progress: ProgressHook,
    report_every: int,
    limits: Limits,
    stop_requested: Callable[[], bool] = lambda: False,
) -> TrialOutcome:
    """Run ``task_function`` on ``job_cfg`` in a child process; never raises for the trial.

    When ``stop_requested()`` turns true (Ctrl-C in the sweep process) the trial is killed
    and the outcome's reason is ``interrupted``; the caller records it and then stops.
    """
    ctx = mp.get_context("fork")  # cheap: torch is already imported; not daemonic (workers)
    parent_end, child_end = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=_child,
        args=(child_end, hydra_context, task_function, job_cfg, os.getpid()),
        daemon=False,
    )
    shm_before = shm_files()
    oom_before = oom_kills()
    start = time.perf_counter()
    # A forked child inherits unflushed output and would print it again when it exits.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    proc.start()
    child_end.close()
    follower = _Follower(proc, parent_end, on_progress, report_every, limits, start, stop_requested)
    outcome = follower.outcome
    try:
        follower.follow()
    finally:
        parent_end.close()
        outcome.wall_s = time.perf_counter() - start
        outcome.oom_kills = oom_kills() - oom_before
        outcome.pids.add(int(proc.pid or 0))
        _clean_up(int(proc.pid or 0), shm_before, outcome)
    return outcome


class _Follower:
    """Follows one trial process until it exits or is stopped, filling ``outcome``.

    Each turn checks, in order: an interrupt from the sweep, the wall-clock, start-up and
    stall limits (:class:`StallWatch`), the memory budget; then it waits briefly for one
    message from the trial.
    """

    def __init__(
        self,
        proc: Any,
        conn: Connection,
        on_progress: ProgressHook,
        report_every: int,
        limits: Limits,
        start: float,
        stop_requested: Callable[[], bool],
    ) -> None:
        self.proc, self.conn = proc, conn
        self.on_progress, self.report_every = on_progress, report_every
        self.limits, self.start = limits, start
        self.stop_requested = stop_requested
        self.outcome = TrialOutcome()
        self.guard = _MemoryGuard(proc.pid, limits, self.outcome.pids)
        self.meter = InterferenceMeter(os.getpid())  # the sweep's tree holds the trial's
        self.watch = StallWatch(limits.startup_s, limits.stall_s, limits.wall_s, start)

    def follow(self) -> TrialOutcome:
        """Until the trial's pipe closes or, the trial process gone, holds nothing more (then
        wait for its exit), or a check stops it.

        A process the trial left running (a rank, a worker) holds the pipe open past the
        trial's death, so the end of the pipe alone would make a killed trial look hung.
        """
        while True:
            if self._stopped():
                return self.outcome
            gone = ended(int(self.proc.pid or 0))  # before the poll: all it sent is in
            try:
                ready = self.conn.poll(min(0.05, self.guard.due_in()))
                message = self.conn.recv() if ready else None
            except (EOFError, OSError):
                break
            if message is None:
                if gone:
                    break
                continue
            self.watch.heard(message[0])
            if self._handle(*message):
                return self.outcome
        self._exited()
        return self.outcome

    def _stopped(self) -> bool:
        """Kill the trial if the sweep is interrupted, a limit passed or memory ran over."""
        outcome = self.outcome
        if self.stop_requested():
            outcome.status, outcome.reason = TrialStatus.FAILED, Reason.INTERRUPTED
            outcome.error = "Ctrl-C in the sweep process: the trial was stopped"
        elif (limit := self.watch.passed()) is not None:
            outcome.reason, outcome.error = Reason.TIMEOUT, limit.error(len(outcome.steps))
        elif self.guard.over_budget():
            outcome.status, outcome.reason = TrialStatus.FAILED, Reason.MEMORY_BUDGET
            outcome.error = (
                f"the trial's process tree reached {self.guard.peak / 2**20:.0f} MB (PSS) and "
                "was stopped before passing the memory budget of "
                f"{self.limits.memory_bytes / 2**20:.0f} MB (hydra.sweeper.memory_budget_mb)"
            )
            outcome.peak_memory_bytes = self.guard.peak
        else:
            return False
        kill_group(self.proc)
        return True

    def _handle(self, kind: str, payload: Any) -> bool:
        """Take in one message; True when the pruner stopped the trial."""
        outcome = self.outcome
        if kind == MessageKind.STEP:
            record, timed = payload
            if timed:
                outcome.steps.append(record)
                if len(outcome.steps) == 1:  # a pruned trial sends no result: meter it here
                    self.meter.start()
                due = len(outcome.steps) % self.report_every == 0
                if due and self.on_progress(outcome.steps):
                    outcome.interference = self.meter.stop()
                    kill_group(self.proc)
                    outcome.status = TrialStatus.PRUNED
                    outcome.reason = TrialStatus.PRUNED.value
                    return True
        elif kind == MessageKind.RESULT:
            outcome.result = payload
            outcome.status = TrialStatus.COMPLETE
        elif kind == MessageKind.ERROR:
            outcome.reason, outcome.error = payload
        elif kind == MessageKind.WORKERS:
            self.guard.pacer.expect_workers(payload)
        return False

    def _exited(self) -> None:
        """The trial closed its pipe: wait for it and classify an exit without a result."""
        outcome = self.outcome
        self.proc.join()
        outcome.exitcode = self.proc.exitcode
        outcome.peak_memory_bytes = self.guard.peak
        if outcome.status != TrialStatus.COMPLETE and outcome.reason is None:
            outcome.reason = classify_exit(self.proc.exitcode)
            outcome.error = (
                f"the trial process exited with status {self.proc.exitcode} and no error"
            )


class _MemoryGuard:
    """Samples the trial's process tree against the budget, paced by :class:`BudgetPacer`:
    a few cheap readings a second far from the budget, up to a hundred near it, and a stop
    as soon as the growth seen would pass the budget before the next reading. The trial
    tells it what its workers will hold before they start (``MessageKind.WORKERS``).
    """

    def __init__(self, pid: int, limits: Limits, pids: set[int]) -> None:
        self.limit = limits.memory_bytes
        self.pacer = BudgetPacer(self.limit)
        self.next = time.perf_counter()
        self.pids = pids  # every process of the tree seen, for the clean-up afterwards
        try:
            self.monitor: ProcessTreeMonitor | None = ProcessTreeMonitor(pid)
        except psutil.Error:
            self.monitor = None

    @property
    def peak(self) -> int:
        """The largest footprint (PSS, estimated between readings) seen so far."""
        return self.pacer.peak

    def due_in(self) -> float:
        """Seconds until the next reading is due (0 when it is due now)."""
        return max(self.next - time.perf_counter(), 0.0)

    def over_budget(self) -> bool:
        """Take a reading if one is due; True when the trial must stop to stay in budget."""
        now = time.perf_counter()
        if self.monitor is None or now < self.next:
            return False
        rss = self.monitor.rss_by_pid()
        self.pids.update(rss)
        over = self.pacer.observe(now, rss, footprint_reader(self.monitor))
        self.next = now + self.pacer.next_in
        return over


def _clean_up(pgid: int, shm_before: set[str], outcome: TrialOutcome) -> None:
    """Kill anything of the trial still alive, remove the shared-memory files it left.

    Only files named for the trial's own processes (PyTorch names them ``torch_<pid>_...``)
    are removed: other programs on the machine, a training job beside the sweep, keep theirs.
    A worker that lived between two samples of the tree is recognised by its pid: started
    after the trial (pids grow) and gone now.
    """
    members = group_members(pgid)
    outcome.pids.update(p.pid for p in members)
    survivors = [p for p in members if not exited(p)]
    outcome.leaked_processes = len(survivors)
    if survivors:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        psutil.wait_procs(survivors, timeout=5)
    for name in shm_files() - shm_before:
        owner = shm_owner(name)
        if owner is None:
            continue
        ours = owner in outcome.pids or (owner > pgid and not psutil.pid_exists(owner))
        if not ours:
            continue
        with contextlib.suppress(FileNotFoundError):
            (SHM / name).unlink()
            outcome.shm_files_removed += 1
    # A trial killed before its storage session ended leaves its scratch folder (a cold or
    # throttled copy of the dataset) behind; only folders whose owner has exited go.

    with contextlib.suppress(OSError):
        remove_stale_scratch()


def _child(
    conn: Connection,
    hydra_context: HydraContext,
    task_function: TaskFunction,
    cfg: DictConfig,
    sweep: int,
) -> None:
    """The trial process: own process group, dies with the sweep, task via run_job."""

    os.setpgrp()
    if not die_with_parent(sweep):  # the sweep died before the signal was set
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the sweep's to handle
    link = channel.TrialChannel(conn)
    channel.attach(link)
    listen_for_workers(lambda per_worker: link.send(MessageKind.WORKERS, per_worker))
    try:
        ret = run_job(
            hydra_context=hydra_context,
            task_function=task_function,
            config=cfg,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )
        if ret.status == JobStatus.FAILED:
            _report(conn, job_error(ret))
    except BaseException as exc:  # report anything, then exit: the parent classifies
        _report(conn, exc)
    finally:
        conn.close()


def _report(conn: Connection, exc: BaseException) -> None:
    text = "".join(traceback.format_exception(exc))
    tail = "\n".join(text.rstrip().splitlines()[-40:])
    with contextlib.suppress(OSError):
        conn.send((MessageKind.ERROR, (classify(type(exc).__name__, text), tail)))
