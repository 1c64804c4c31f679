"""Start the node's ranks through PyTorch's elastic launcher (torchrun's engine) and watch them.

``elastic_launch`` runs the launcher's agent in the trial process, which forks
``trial.nproc_per_node`` rank processes (children of the trial, in its process group, so a
sweep's kill of that group takes them and their workers), with a c10d rendezvous on a free
loopback port. ``max_restarts=0``: the first rank to fail stops them all, and the launcher
raises ``ChildFailedError`` naming the failed ranks; :func:`rank_failure` turns that into one
:class:`~loadertune.record._failures.TrialFailure` naming the rank that caused it, with that rank's
traceback. Ctrl-C, which the launcher's own handler takes, is a ``KeyboardInterrupt`` as in
a trial of one rank. A rank that hangs
is found by :class:`~loadertune.ranks.board.Watchdog` and killed, so the same path reports
it; what a dead rank leaves running comes back to the trial process and is stopped at once
(:mod:`.adoption`). A port taken between choosing and binding it is retried on another.
Afterwards nothing of the trial survives: no process of its tree, no ``/dev/shm/torch_*``
file of its processes.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import multiprocessing as mp
import os
import signal
import socket
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import psutil

from loadertune import _torch_private, ranks
from loadertune._lazy import (
    elastic_api,
    elastic_errors,
    elastic_launcher,
    elastic_logs,
    elastic_rendezvous,
)
from loadertune.loader import build_workload
from loadertune.machine import machine_info
from loadertune.ranks.adoption import reap, subreaper
from loadertune.ranks.board import Board, StepForwarder, Watchdog
from loadertune.ranks.node import node_result
from loadertune.record import RankRaised, Reason, TrialFailure, classify
from loadertune.storage import ranks_folder

if TYPE_CHECKING:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from loadertune.config import RunConfig
    from loadertune.measure import StepCallback
    from loadertune.record import TrialResult
    from loadertune.storage import StorageSession

PORT_TRIES = 5
HANG_MARGIN_S = 10.0  # a rank silent for trial.time_limit_s plus this is hung
SHUTDOWN_S = 5  # the launcher's grace between SIGTERM and SIGKILL when it stops the ranks
RDZV_TIMEOUT_S = 120
SHM = Path("/dev/shm")
_LAUNCHER_LOGGERS = (
    "torch.distributed.elastic",
    "torch.distributed.launcher",
    "torchelastic",
    "torch.multiprocessing",
)
_LAUNCHER_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")  # the launcher takes these


def run_ranks(
    config: RunConfig, store: StorageSession, on_step: StepCallback | None = None
) -> TrialResult:
    """Measure ``config`` on ``trial.nproc_per_node`` ranks; the node's :class:`TrialResult`.

    The workload is built here first (its checks fail here, in one line, before any rank
    starts; the dataset is built once and every rank forks with it), then each rank builds
    its own loader and step. ``on_step`` gets the node's steps, which rank 0 sends.

    Raises:
        ConfigError: the workload cannot be built, before any rank starts.
        TrialFailure: a rank raised, died or hung; the message names it.
    """
    workload = build_workload(config, store)
    store.before_loading()
    # Workers of a loader this process ran before (a caller's, a test's) stay registered with
    # PyTorch's SIGCHLD handler, and the ranks fork with that table: a rank exiting would then
    # raise "DataLoader worker ... is killed" here, or in a rank, for a worker long gone.
    _torch_private.unwatch_all_workers()
    world = config.trial.nproc_per_node
    hang_s = config.trial.time_limit_s + HANG_MARGIN_S
    ctx = mp.get_context("fork")
    board = Board(ctx, world)
    shm_before = _shm_files()
    failure: TrialFailure | None = None
    stopped_by: int | None = None
    with (
        ranks_folder() as logs,
        _omp_default(),
        subreaper(),
        _signals_kept(),
        _launcher_quiet(),
        StepForwarder(ctx, on_step) as steps,
        Watchdog(board, hang_s) as dog,
    ):
        args = (config, store, workload.dataset, board, steps, os.getpid(), hang_s)
        try:
            returns = launch(world, str(logs), args)
        except _child_failed() as exc:
            failure = rank_failure(exc.failures, board, dog, world)
        except _signal_exception() as exc:  # the launcher's handler took the trial's signal
            if exc.sigval == signal.SIGINT:
                raise KeyboardInterrupt from None  # Ctrl-C, as a trial of one rank sees it
            stopped_by = exc.sigval
        finally:
            _clean_up(dog, board, shm_before)
    if stopped_by is not None:
        _die_of(stopped_by)
    if failure is not None:
        raise failure
    node = node_result(list(returns.values()), machine_info())
    batch = workload.batch
    return replace(node, batch_bytes=batch.bytes, batch_tensors=batch.tensors) if batch else node


def _die_of(sig: int) -> NoReturn:
    """The signal the launcher took (SIGTERM, SIGHUP, SIGQUIT), raised again once the ranks
    are stopped, for the trial's own handler, as a trial of one rank meets it (by default,
    killed by it), never a Python error blamed on the dataset.

    Raises:
        TrialFailure: ``interrupted``, where the trial's handler let the signal pass.
    """
    signal.raise_signal(sig)
    raise TrialFailure(Reason.INTERRUPTED, f"the trial was stopped by {signal.Signals(sig).name}")


def launch(world: int, logs: str, args: tuple[Any, ...]) -> dict[int, Any]:
    """``elastic_launch`` of :func:`~loadertune.ranks.rank.rank_main` on ``world`` ranks.

    A rendezvous port another process took first is tried again on a fresh one.
    """
    last: Exception | None = None
    for attempt in range(PORT_TRIES):
        config = elastic_launcher.LaunchConfig(
            min_nodes=1,
            max_nodes=1,
            nproc_per_node=world,
            run_id=f"loadertune-{os.getpid()}-{attempt}",
            rdzv_backend="c10d",
            rdzv_endpoint=f"127.0.0.1:{free_port()}",
            rdzv_configs={"is_host": True, "timeout": RDZV_TIMEOUT_S},
            max_restarts=0,
            start_method="fork",
            logs_specs=elastic_logs.DefaultLogsSpecs(log_dir=logs),
            shutdown_timeout=SHUTDOWN_S,
        )
        try:
            return elastic_launcher.elastic_launch(config, ranks.rank_main)(*args)  # type: ignore[no-any-return]
        except (
            elastic_rendezvous.RendezvousConnectionError
        ) as exc:  # the port was taken: another one
            last = exc
    raise TrialFailure(
        Reason.RANK_FAILED,
        f"the ranks' rendezvous could not bind a loopback port in {PORT_TRIES} tries: {last}",
    )


def free_port() -> int:
    """A loopback port free now (the rendezvous binds it a moment later: see :func:`launch`)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _child_failed() -> type[ChildFailedError]:
    return elastic_errors.ChildFailedError


def _signal_exception() -> type[SignalException]:
    return elastic_api.SignalException


def rank_failure(
    failures: Mapping[int, Any], board: Board, dog: Watchdog, world: int
) -> TrialFailure:
    """One failure naming the rank that caused the others' (``failures``: the launcher's).

    A hung rank (the watchdog's) is the cause; else a rank that died without a Python error
    (the others then fail on the broken group); else the first to raise. The launcher reports
    the first rank it saw exit: a follower holds its exit until the cause's is collected
    (:func:`~loadertune.ranks.rank.rank_main`), so that is the cause.
    """
    if dog.hung is not None:
        rank, silent = dog.hung
        return TrialFailure(
            Reason.TIMEOUT,
            f"rank {rank} of {world} made no progress for {silent:.0f} s while the others "
            f"waited for it (trial.time_limit_s + {HANG_MARGIN_S:.0f} s); every rank was stopped",
        )
    rank = min(failures, key=lambda r: (_raised(failures[r]), board.failed_at(r) or 1e18))
    failure = failures[rank]
    if _raised(failure):
        message = failure.message
        text = str(message.get("message", ""))
        trace = str(message.get("extraInfo", {}).get("py_callstack", ""))
        kind = text.split(":", 1)[0]
        # The rank's own traceback after the first line: its innermost frame is where the
        # error is (the user's dataset or step), as for a trial of one rank.
        return RankRaised(
            classify(kind, f"{trace}\n{text}"), f"rank {rank} of {world}", text, trace
        )
    how = (
        f"was killed by {failure.signal_name()}"
        if failure.exitcode < 0
        else f"exited with status {failure.exitcode}"
    )
    return TrialFailure(
        Reason.RANK_FAILED,
        f"rank {rank} of {world} {how} without a Python error; every rank was stopped",
    )


def _raised(failure: Any) -> bool:
    """The rank wrote an error file: it raised (rather than died)."""
    return isinstance(failure.error_file_data.get("message"), dict)  # what @record writes


@contextlib.contextmanager
def _omp_default() -> Iterator[None]:
    """``OMP_NUM_THREADS=1`` for the ranks unless set, as torchrun does."""
    if "OMP_NUM_THREADS" in os.environ:
        yield
        return
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        yield
    finally:
        os.environ.pop("OMP_NUM_THREADS", None)


@contextlib.contextmanager
def _launcher_quiet() -> Iterator[None]:
    """The launcher's own log lines off while it runs: the trial's failure says what happened,
    and torch's log formatter imports its compiler (seconds) to format the first error."""
    importlib.import_module(elastic_launcher.__name__)  # its loggers exist from here on

    names = [n for n in logging.root.manager.loggerDict if n.startswith(_LAUNCHER_LOGGERS)]
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


@contextlib.contextmanager
def _signals_kept() -> Iterator[None]:
    """The launcher installs its own handlers in the main thread; put the trial's back."""
    names = [n for n in _LAUNCHER_SIGNALS if hasattr(signal, n)]
    kept = {n: signal.getsignal(getattr(signal, n)) for n in names}
    try:
        yield
    finally:
        for name, handler in kept.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(getattr(signal, name), handler)


def _clean_up(dog: Watchdog, board: Board, shm_before: set[str]) -> None:
    """Kill what the trial's tree left alive; remove its processes' shared-memory files."""
    survivors = dog.survivors()
    for proc in survivors:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    deadline = time.monotonic() + 5.0
    while dog.survivors() and time.monotonic() < deadline:  # zombies count as gone
        time.sleep(0.05)
    while dog.adopted and time.monotonic() < deadline:  # nothing else collects their exits
        dog.adopted = reap(dog.adopted)
        time.sleep(0.01)
    ours = set(dog.seen) | {board.pid(r) for r in range(board.world)}
    for name in _shm_files() - shm_before:
        parts = name.split("_")
        if len(parts) > 2 and parts[1].isdigit() and int(parts[1]) in ours:
            with contextlib.suppress(FileNotFoundError):
                (SHM / name).unlink()


def _shm_files() -> set[str]:
    try:
        return {p.name for p in SHM.iterdir() if p.name.startswith("torch_")}
    except OSError:
        return set()
