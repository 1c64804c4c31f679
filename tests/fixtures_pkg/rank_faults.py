"""Steps for model=custom that go wrong on one rank of a multi-rank trial, each in one way."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any


def failing_step(mode: str, rank: int = 1, at_step: int = 3) -> Callable[[Any], None]:
    """A step that, on ``rank`` at its ``at_step``-th call, raises, exits, is killed or hangs."""
    calls = 0

    def step(batch: Any) -> None:
        nonlocal calls
        calls += 1
        if int(os.environ.get("RANK", "0")) != rank or calls < at_step:
            time.sleep(0.002)
            return
        if mode == "raise":
            raise ValueError(f"step {calls} cannot go on")
        if mode == "exit":
            os._exit(7)
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "hang":
            time.sleep(3600)

    return step
