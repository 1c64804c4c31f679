"""A dead rank's leftovers come back to the trial process, which stops and reaps them; a rank
that fails knows whether another failed before it. Real processes, no timings asserted."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from loadertune.ranks.adoption import reap, subreaper
from loadertune.ranks.board import Board, Watchdog

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's prctl")
FORK = multiprocessing.get_context("fork")


def _orphan() -> int:
    """A sleeping process whose parent (this process's child) has exited and been reaped."""
    read, write = os.pipe()
    middle = os.fork()
    if middle == 0:
        orphan = os.fork()
        if orphan == 0:
            os.close(write)  # the pipe ends when the middle process does
            time.sleep(120)
            os._exit(0)
        os.write(write, str(orphan).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(middle, 0)
    with os.fdopen(read) as pipe:
        return int(pipe.read())


@contextlib.contextmanager
def _killed_after(pid: int) -> Iterator[None]:
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _reaped_within(pids: set[int], seconds: float) -> set[int]:
    deadline = time.monotonic() + seconds
    while pids and time.monotonic() < deadline:
        pids = reap(pids)
        time.sleep(0.01)
    return pids


def test_an_orphan_comes_back_to_a_subreaper_and_is_reaped_by_it() -> None:
    with subreaper() as adopting:
        assert adopting
        orphan = _orphan()
        with _killed_after(orphan):
            assert psutil.Process(orphan).ppid() == os.getpid()
            assert reap({orphan}) == {orphan}  # still running: nothing collected
            os.kill(orphan, signal.SIGKILL)
            assert _reaped_within({orphan}, 10) == set()
            assert not psutil.pid_exists(orphan)


def test_outside_the_block_an_orphan_goes_elsewhere() -> None:
    with subreaper():
        pass
    orphan = _orphan()
    with _killed_after(orphan):
        assert psutil.Process(orphan).ppid() != os.getpid()
        assert reap({orphan}) == set()  # not this process's child: nothing to collect


def _dying_rank(board: Board, conn: Any) -> None:
    """A rank that starts a worker-like child, says its pid, and dies without a Python error."""
    board.started(0)
    worker = FORK.Process(target=time.sleep, args=(120,))
    worker.start()
    conn.send(worker.pid)
    os._exit(7)


def test_the_watchdog_stops_and_reaps_what_a_dead_rank_left_running() -> None:
    board = Board(FORK, 1)
    parent_end, child_end = FORK.Pipe()
    with subreaper(), Watchdog(board, limit_s=60.0) as dog:
        rank = FORK.Process(target=_dying_rank, args=(board, child_end))
        rank.start()
        worker = parent_end.recv()
        with _killed_after(worker):
            rank.join(10)
            assert rank.exitcode == 7
            deadline = time.monotonic() + 10
            while worker not in dog.adopted and psutil.pid_exists(worker):
                assert time.monotonic() < deadline, "the dead rank's worker was left running"
                time.sleep(0.05)
    assert _reaped_within(dog.adopted, 10) == set()
    assert not psutil.pid_exists(worker)  # killed and reaped: no zombie left behind


def _start_and_end(board: Board, rank: int) -> None:
    board.started(rank)


def test_a_rank_knows_which_failed_before_it() -> None:
    board = Board(FORK, 3)
    board.started(0)
    board.started(2)
    gone = FORK.Process(target=_start_and_end, args=(board, 1))
    assert board.failed_before(0) is None  # rank 1 not started yet: not a failure
    gone.start()
    gone.join(10)
    assert board.failed_before(0) == 1  # exited without a stamp: died without a Python error
    assert board.reaped(1)
    fresh = Board(FORK, 2)
    fresh.started(0)
    fresh.started(1)
    assert fresh.failed_before(0) is None and fresh.failed_before(1) is None
    fresh.failed(1)
    fresh.failed(0)
    assert fresh.failed_before(0) == 1  # it stamped first: rank 0 follows it
    assert fresh.failed_before(1) is None  # rank 1 is the cause


def test_the_clean_up_kills_a_process_the_watchdog_had_not_polled_yet() -> None:
    """A worker forked just before the trial ends (as Ctrl-C comes), between two polls of
    the watchdog, is killed with the rest, and a process the caller had before is left."""
    from loadertune.ranks.launch import _clean_up

    board = Board(FORK, 1)
    callers = FORK.Process(target=time.sleep, args=(120,))
    callers.start()
    with _killed_after(callers.pid), subreaper(), Watchdog(board, limit_s=3600.0) as dog:
        dog._stop.set()  # no poll from here on: only the clean-up can look
        dog._thread.join()
        late = FORK.Process(target=time.sleep, args=(120,))
        late.start()
        with _killed_after(late.pid):
            assert late.pid not in dog.seen
            _clean_up(dog, board, set())
            late.join(10)
            assert late.exitcode == -9, "a process of the trial's tree outlived its clean-up"
        assert callers.is_alive()
