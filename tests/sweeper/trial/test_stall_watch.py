"""The limits on a trial's silence, on a clock the test moves: its start-up (to the first
step) by ``startup_timeout_s``, the gaps between steps by ``stall_timeout_s``, the whole
process by ``trial_timeout_s``; the error names the key to raise."""

from __future__ import annotations

import pytest

from hydra_plugins.loadertune_sweeper.trial._stall_watch import StallWatch
from loadertune.record._channel import MessageKind


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# (messages as (seconds since the start, kind), seconds since the start when asked,
#  the key of the limit passed or None); start-up 30 s, stall 5 s, wall 100 s.
CASES = [
    ([], 29.0, None),  # a slow start-up, within its own limit
    ([], 31.0, "startup_timeout_s"),
    ([(2.0, MessageKind.WORKERS)], 31.0, "startup_timeout_s"),  # no step: still starting
    ([(20.0, MessageKind.STEP)], 24.0, None),  # the first step after 20 s: no stall
    ([(20.0, MessageKind.STEP)], 26.0, "stall_timeout_s"),  # then silent over 5 s
    ([(20.0, MessageKind.STEP), (24.0, MessageKind.STEP)], 28.0, None),
    ([(20.0, MessageKind.STEP), (95.0, MessageKind.STEP)], 101.0, "trial_timeout_s"),
]


@pytest.mark.parametrize(("heard", "asked", "key"), CASES)
def test_which_limit_a_trial_passes(
    heard: list[tuple[float, MessageKind]], asked: float, key: str | None
) -> None:
    clock = Clock()
    watch = StallWatch(startup_s=30.0, stall_s=5.0, wall_s=100.0, start=0.0, clock=clock)
    for at, kind in heard:
        clock.now = at
        watch.heard(kind)
    clock.now = asked
    passed = watch.passed()
    assert (passed and passed.key) == (key and f"hydra.sweeper.{key}")


def test_the_error_names_the_phase_and_the_key_to_raise() -> None:
    clock = Clock()
    watch = StallWatch(startup_s=30.0, stall_s=5.0, wall_s=100.0, start=0.0, clock=clock)
    clock.now = 31.0
    passed = watch.passed()
    assert passed is not None
    error = passed.error(0)
    assert error.startswith("no progress: the trial passed its start-up limit (30 s, ")
    assert "no step yet: the dataset's set-up, worker start or the first batch" in error
    assert error.endswith("raise hydra.sweeper.startup_timeout_s")
