"""Run one trial in a child process and follow it from the sweep process.

The child runs the app's task function through Hydra's ``run_job`` (so each trial has its
job directory, ``.hydra/`` files and ``hydra.job.num`` as with any launcher) in a process
group of its own, and streams each step back over a pipe. The parent keeps every step as it
arrives, asks the pruner every ``report_every`` timed steps, and kills the whole group (the
trial and its DataLoader workers) when the trial is pruned or over its wall-clock limit.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from hydra.core.utils import JobStatus, run_job
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from loadertune.result import TrialResult
from loadertune.timing import StepRecord

# Decides after a batch of timed steps whether to stop the trial (True: prune it).
ProgressHook = Callable[[list[StepRecord]], bool]


@dataclass
class TrialOutcome:
    """How a trial's process ended, with everything it sent before."""

    status: str  # "complete" | "pruned" | "failed"
    result: TrialResult | None = None
    steps: list[StepRecord] = field(default_factory=list)
    reason: str | None = None
    error: str | None = None
    exitcode: int | None = None
    wall_s: float = 0.0


def run_trial_process(
    hydra_context: HydraContext,
    task_function: TaskFunction,
    job_cfg: DictConfig,
    on_progress: ProgressHook,
    report_every: int,
    wall_limit_s: float,
) -> TrialOutcome:
    """Run ``task_function`` on ``job_cfg`` in a child process; never raises for the trial."""
    ctx = mp.get_context("fork")  # cheap: torch is already imported; not daemonic (workers)
    parent_end, child_end = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=_child, args=(child_end, hydra_context, task_function, job_cfg), daemon=False
    )
    start = time.perf_counter()
    proc.start()
    child_end.close()
    outcome = _follow(proc, parent_end, on_progress, report_every, start + wall_limit_s)
    outcome.wall_s = time.perf_counter() - start
    return outcome


def _follow(
    proc: Any, conn: Connection, on_progress: ProgressHook, report_every: int, deadline: float
) -> TrialOutcome:
    outcome = TrialOutcome(status="failed")
    while True:
        if time.perf_counter() > deadline:
            _kill_group(proc)
            outcome.reason = "timeout"
            outcome.error = "the trial exceeded its wall-clock limit and was killed"
            break
        try:
            ready = conn.poll(0.1)
            message = conn.recv() if ready else None
        except (EOFError, OSError):
            proc.join()
            break
        if message is None:
            continue
        kind, payload = message
        if kind == "step":
            record, timed = payload
            if timed:
                outcome.steps.append(record)
                if len(outcome.steps) % report_every == 0 and on_progress(outcome.steps):
                    _kill_group(proc)
                    outcome.status = "pruned"
                    outcome.reason = "pruned"
                    return outcome
        elif kind == "result":
            outcome.result = payload
            outcome.status = "complete"
        elif kind == "error":
            outcome.reason, outcome.error = payload
    proc.join()
    outcome.exitcode = proc.exitcode
    if outcome.status != "complete" and outcome.reason is None:
        outcome.reason = "trial_killed" if (proc.exitcode or 0) < 0 else "trial_crashed"
        outcome.error = f"the trial process exited with status {proc.exitcode}"
    return outcome


def _kill_group(proc: Any) -> None:
    """Kill the trial's process group: the trial and every DataLoader worker it started."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.join()


def _child(
    conn: Connection, hydra_context: HydraContext, task_function: TaskFunction, cfg: DictConfig
) -> None:
    """The trial process: own process group, channel attached, the app's task via run_job."""
    from loadertune import channel

    os.setpgrp()
    channel.attach(channel.TrialChannel(conn))
    try:
        ret = run_job(
            hydra_context=hydra_context,
            task_function=task_function,
            config=cfg,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )
        if ret.status == JobStatus.FAILED:
            exc = ret._return_value
            conn.send(("error", (_reason(exc), _tail(exc))))
    except BaseException as exc:  # report anything, then exit: the parent classifies
        conn.send(("error", (_reason(exc), _tail(exc))))
    finally:
        conn.close()


def _reason(exc: BaseException) -> str:
    from loadertune.errors import ConfigError

    if isinstance(exc, ConfigError):
        return "invalid_config"
    return "error"


def _tail(exc: BaseException, lines: int = 30) -> str:
    text = "".join(traceback.format_exception(exc))
    return "\n".join(text.rstrip().splitlines()[-lines:])
