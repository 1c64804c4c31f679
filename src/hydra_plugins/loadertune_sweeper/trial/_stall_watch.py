"""The limits on a trial's silence: its start-up, the gaps between its steps, its whole run.

A trial says nothing while it starts: the dataset is built (a stream may list its shards or
fill a shuffle buffer), the settings are checked, workers start and the first batch is read.
That can take a minute on a slow stream, so it is judged by ``hydra.sweeper.startup_timeout_s``
(until the trial reports its first step), and only the silence between two steps, where a
healthy trial speaks every few milliseconds, by the shorter ``stall_timeout_s``. The whole
process stays under ``trial_timeout_s``. Past any of them the trial counts as hung (reason
``timeout``) and the error names the key that sets the limit passed, and what to raise.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from loadertune.record import MessageKind

_KEY = "hydra.sweeper"


@dataclass(frozen=True)
class Passed:
    """A limit passed: which, its seconds, the key that sets it, what the trial was doing."""

    which: str
    seconds: float
    key: str
    doing: str

    def error(self, timed_steps: int) -> str:
        """The trial's error, one line naming the key and the fix."""
        doing = f"{self.doing}; " if self.doing else ""
        return (
            f"no progress: the trial passed its {self.which} ({self.seconds:.0f} s, {self.key}; "
            f"{doing}{timed_steps} timed steps done) and its process group was killed. If it "
            f"was slow rather than hung, raise {self.key}"
        )


class StallWatch:
    """Which limit a trial is under, from what it has said so far; the clock is injectable."""

    def __init__(
        self,
        startup_s: float,
        stall_s: float,
        wall_s: float,
        start: float,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.startup_s, self.stall_s, self.wall_s = startup_s, stall_s, wall_s
        self.start = self.last_heard = start
        self.clock = clock
        self.stepped = False  # a step reported: the start-up is over

    def heard(self, kind: str) -> None:
        """The trial sent a message; its first step ends the start-up."""
        self.last_heard = self.clock()
        if kind == MessageKind.STEP:
            self.stepped = True

    def passed(self) -> Passed | None:
        """The limit the trial has passed by now, if any."""
        now = self.clock()
        if now - self.start > self.wall_s:
            return Passed("wall-clock limit", self.wall_s, f"{_KEY}.trial_timeout_s", "")
        if not self.stepped:
            if now - self.start > self.startup_s:
                return Passed(
                    "start-up limit",
                    self.startup_s,
                    f"{_KEY}.startup_timeout_s",
                    "no step yet: the dataset's set-up, worker start or the first batch",
                )
        elif now - self.last_heard > self.stall_s:
            return Passed(
                "stall limit", self.stall_s, f"{_KEY}.stall_timeout_s", "silent between steps"
            )
        return None
