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


def killing_step(
    folder: str, up: int = 1, rank: int = 1, at_step: int = 3
) -> Callable[[Any], None]:
    """A step that, at its ``at_step``-th call, has every rank write its pid and its children's
    (DataLoader workers, rank 0's tree sampler) to ``folder``/rank-<RANK>.json; then ``rank``
    SIGKILLs the process ``up`` generations above it (1: the process that started the ranks)."""
    import json
    from pathlib import Path

    import psutil

    calls = 0
    here = Path(folder)

    def step(batch: Any) -> None:
        nonlocal calls
        calls += 1
        time.sleep(0.002)
        if calls != at_step:
            return
        me = int(os.environ.get("RANK", "0"))
        kids = [p.pid for p in psutil.Process().children(recursive=True)]
        (here / f"rank-{me}.tmp").write_text(json.dumps({"pid": os.getpid(), "children": kids}))
        (here / f"rank-{me}.tmp").rename(here / f"rank-{me}.json")
        if me != rank:
            return
        world = int(os.environ["WORLD_SIZE"])
        deadline = time.monotonic() + 120.0
        while len(list(here.glob("rank-*.json"))) < world and time.monotonic() < deadline:
            time.sleep(0.01)
        target = psutil.Process().parents()[up - 1]
        (here / "killed").write_text(str(target.pid))
        os.kill(target.pid, signal.SIGKILL)

    return step
