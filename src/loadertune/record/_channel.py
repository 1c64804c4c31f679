"""The line from a trial's process back to the sweep that started it.

Under ``loadertune -m`` each trial runs in a child process and only the sweep process writes
to Optuna and MLflow. The child's task function finds the channel here and sends each step
as it finishes (so the sweep can prune, and keeps what was measured if the child dies) and
the final result. Outside a sweep there is no channel and the task records the run itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from multiprocessing.connection import Connection
from typing import Any

_current: TrialChannel | None = None


class MessageKind(str, Enum):
    """What a message from the trial carries; equal to its plain string (``"step"``)."""

    STEP = "step"  # payload: (StepRecord, timed)
    RESULT = "result"  # payload: TrialResult
    ERROR = "error"  # payload: (reason, traceback tail)
    WORKERS = "workers"  # payload: bytes each process joining the trial will hold (preflight)

    def __str__(self) -> str:
        return self.value


class TrialStatus(str, Enum):
    """How a trial's process ended, as the sweep sees it; equal to its plain string."""

    COMPLETE = "complete"  # the result arrived
    PRUNED = "pruned"  # the pruner stopped it
    FAILED = "failed"  # anything else: the reason says what

    def __str__(self) -> str:
        return self.value


@dataclass
class TrialChannel:
    """The child's end of a pipe to the sweep process."""

    conn: Connection

    def send(self, kind: MessageKind | str, payload: Any) -> None:
        """Send one message: ``(MessageKind.STEP, (record, timed))``, ``(RESULT, result)`` ..."""
        self.conn.send((MessageKind(kind), payload))


def current() -> TrialChannel | None:
    """The channel to the sweep, when this process runs a trial for one."""
    return _current


def attach(channel: TrialChannel | None) -> None:
    """Set (or clear) the channel for this process; the sweep's child calls this first."""
    global _current
    _current = channel
