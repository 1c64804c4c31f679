"""The line from a trial's process back to the sweep that started it.

Under ``loadertune -m`` each trial runs in a child process and only the sweep process writes
to Optuna and MLflow. The child's task function finds the channel here and sends each step
as it finishes (so the sweep can prune, and keeps what was measured if the child dies) and
the final result. Outside a sweep there is no channel and the task records the run itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

_current: TrialChannel | None = None


@dataclass
class TrialChannel:
    """The child's end of a pipe to the sweep process."""

    conn: Connection

    def send(self, kind: str, payload: Any) -> None:
        """Send one message: ``("step", (record, timed))``, ``("result", TrialResult)`` ..."""
        self.conn.send((kind, payload))


def current() -> TrialChannel | None:
    """The channel to the sweep, when this process runs a trial for one."""
    return _current


def attach(channel: TrialChannel | None) -> None:
    """Set (or clear) the channel for this process; the sweep's child calls this first."""
    global _current
    _current = channel
