"""Messages from a trial to the sweep, and how the sweep side takes them in."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import time
from multiprocessing.connection import Connection
from typing import Any

import psutil
import pytest

from hydra_plugins.loadertune_sweeper.trial._trial_process import (
    Limits,
    TrialOutcome,
    _clean_up,
    _Follower,
)
from loadertune.measure._timing import StepRecord
from loadertune.record._channel import MessageKind, TrialChannel, TrialStatus


def test_enums_equal_their_plain_strings() -> None:
    plain: list[str] = ["complete", "pruned", "failed"]  # what the sweep compares with
    assert list(TrialStatus) == plain
    assert MessageKind("step") is MessageKind.STEP
    assert str(TrialStatus.PRUNED) == "pruned"
    assert f"{MessageKind.RESULT}" == "result"
    assert pickle.loads(pickle.dumps(TrialStatus.COMPLETE)) is TrialStatus.COMPLETE
    assert TrialOutcome().status == "failed"


def test_channel_sends_plain_string_kinds_as_enums() -> None:
    receive, send = mp.Pipe(duplex=False)
    TrialChannel(send).send("step", ("record", True))
    kind, payload = receive.recv()
    assert kind is MessageKind.STEP
    assert payload == ("record", True)
    with pytest.raises(ValueError):
        TrialChannel(send).send("nonsense", None)


def _record(i: int) -> StepRecord:
    return StepRecord(i, float(i), 0.0, 0.0, 0.01, i + 0.01, 4)


def _own_group_then_wait(conn: Connection) -> None:
    os.setpgrp()
    conn.send("ready")
    time.sleep(60)


def _follower(report_every: int, prune: bool) -> tuple[_Follower, Any, list[int]]:
    ready, child_end = mp.Pipe()
    proc = mp.get_context("fork").Process(target=_own_group_then_wait, args=(child_end,))
    proc.start()
    assert ready.poll(60) and ready.recv() == "ready"
    asked: list[int] = []

    def on_progress(steps: list[StepRecord]) -> bool:
        asked.append(len(steps))
        return prune

    limits = Limits(wall_s=600.0, stall_s=600.0, startup_s=600.0, memory_bytes=2**40)
    follower = _Follower(proc, ready, on_progress, report_every, limits, 0.0, lambda: False)
    return follower, proc, asked


def test_steps_results_and_errors_are_taken_in() -> None:
    follower, proc, asked = _follower(report_every=2, prune=False)
    try:
        for i in range(5):
            assert not follower._handle("step", (_record(i), True))  # as cli.py sends
        assert not follower._handle(MessageKind.STEP, (_record(9), False))  # warm-up
        assert not follower._handle(MessageKind.RESULT, "the result")
    finally:
        proc.kill()
        proc.join()
    outcome = follower.outcome
    assert asked == [2, 4]  # every report_every timed steps, however many come
    assert [r.index for r in outcome.steps] == [0, 1, 2, 3, 4]
    assert outcome.status is TrialStatus.COMPLETE
    assert outcome.result == "the result"  # type: ignore[comparison-overlap]
    follower._handle("error", ("dataset_error", "tail"))
    assert (outcome.reason, outcome.error) == ("dataset_error", "tail")


def test_a_pruned_trial_is_killed_with_its_group() -> None:
    follower, proc, asked = _follower(report_every=3, prune=True)
    stopped = [follower._handle("step", (_record(i), True)) for i in range(3)]
    assert stopped == [False, False, True]
    assert not proc.is_alive()
    assert follower.outcome.status == "pruned"
    assert follower.outcome.reason == "pruned"
    assert asked == [3]


def _leader_with_an_exited_child(conn: Connection) -> None:
    os.setpgrp()
    child = os.fork()
    if child == 0:
        os._exit(0)
    conn.send(child)  # never reaped here: a zombie in the group, as a killed worker is
    time.sleep(60)


def test_the_clean_up_kills_what_lives_and_counts_an_exited_worker_as_gone() -> None:
    ready, child_end = mp.Pipe()
    leader = mp.get_context("fork").Process(target=_leader_with_an_exited_child, args=(child_end,))
    leader.start()
    assert ready.poll(60)
    exited = ready.recv()
    deadline = time.monotonic() + 30
    while psutil.Process(exited).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    outcome = TrialOutcome()
    try:
        _clean_up(int(leader.pid or 0), set(), outcome)
    finally:
        leader.kill()
        leader.join()
    # The live leader was left over and killed; the exited child, waiting for its parent to
    # reap it, is neither counted nor waited for, yet known as the trial's (its /dev/shm files).
    assert outcome.leaked_processes == 1
    assert {int(leader.pid or 0), exited} <= outcome.pids
    assert not psutil.pid_exists(int(leader.pid or 0))
