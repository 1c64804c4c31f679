"""A trial's DataLoader workers die with the process that started them, even mid-start-up.

PyTorch's worker notices a dead parent only when the parent it recorded at start-up has
gone; one whose parent is killed while it is still starting records init as its parent and
waits forever. These tests kill the parent inside that window on purpose.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from loadertune.guards._worker_tether import TetheredInit, tether
from tests._processes import zombie

# A training process whose two workers take 1.5 s to start (their own worker_init_fn): it
# is killed as soon as both have started, long before either has finished starting.
_KILLED_MID_START = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    import torch
    from torch.utils.data import DataLoader
    from loadertune.guards._worker_tether import tether

    folder = Path(sys.argv[1])

    def slow_start(worker_id):
        (folder / f"worker-{os.getpid()}").write_text("")
        time.sleep(1.5)

    loader = DataLoader(list(range(64)), batch_size=4, num_workers=2, worker_init_fn=slow_start)
    if sys.argv[2] == "tethered":
        tether(loader, "fork")
    batches = iter(loader)  # starts the workers
    while len(list(folder.glob("worker-*"))) < 2:
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def _workers_after_kill(folder: Path, how: str) -> list[int]:
    """The pids of the killed process's workers still alive 8 s after it died (longer than
    PyTorch's own 5 s check of the parent)."""
    # Tethered, its output ends with it: read it, as a sweep's caller does. Plain, an
    # orphaned worker holds the pipes open: not read, or this would wait forever.
    pipe = subprocess.PIPE if how == "tethered" else subprocess.DEVNULL
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED_MID_START, str(folder), how],
        stdout=pipe,
        stderr=pipe,
        timeout=600,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    pids = [int(p.name.split("-")[1]) for p in folder.glob("worker-*")]
    assert len(pids) == 2
    deadline = time.monotonic() + 8.0
    alive = pids
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in pids if psutil.pid_exists(p) and not zombie(p)]
    return alive


@pytest.mark.slow
def test_workers_of_a_trial_killed_while_they_start_do_not_outlive_it(tmp_path: Path) -> None:
    left = _workers_after_kill(tmp_path, "tethered")
    for pid in left:  # clean up before failing
        os.kill(pid, signal.SIGKILL)
    assert left == []


@pytest.mark.slow
def test_untethered_workers_outlive_a_parent_killed_while_they_start(tmp_path: Path) -> None:
    """The hole this module closes, shown on PyTorch's own loader: if this ever fails,
    PyTorch closed it and the tether can go."""
    left = _workers_after_kill(tmp_path, "plain")
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert len(left) == 2


def _init_in_child(creator: int, marker: Path) -> None:
    TetheredInit(creator, lambda _: marker.write_text("ran"))(0)


def test_a_worker_whose_creator_is_gone_exits_before_the_loaders_own_init(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "inner"
    ctx = mp.get_context("fork")
    gone = ctx.Process(target=_init_in_child, args=(os.getpid() + 10**6, marker))
    gone.start()
    gone.join(60)
    assert gone.exitcode == 0 and not marker.exists()
    here = ctx.Process(target=_init_in_child, args=(os.getpid(), marker))
    here.start()
    here.join(60)
    assert here.exitcode == 0 and marker.read_text() == "ran"


def test_only_workers_this_process_starts_are_tethered() -> None:
    from torch.utils.data import DataLoader

    def own(_: int) -> None:
        return None

    tethered = tether(DataLoader([1, 2], num_workers=1, worker_init_fn=own), "spawn")
    assert tethered.worker_init_fn == TetheredInit(os.getpid(), own)
    for method, workers in (("forkserver", 1), ("fork", 0)):
        loader = tether(DataLoader([1, 2], num_workers=workers, worker_init_fn=own), method)
        assert loader.worker_init_fn is own
