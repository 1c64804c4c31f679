"""One timing process per host: a holder named to the one refused, a waiter that runs after it,
no stale lock after a kill. Real processes hold the lock."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadertune.checks import _host_lock as host_lock
from loadertune.errors import ConfigError

HOLD = """
import sys, time
from pathlib import Path
from loadertune.checks._host_lock import timing_lock
with timing_lock("a sweep of study 'held'", directory=Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
    print("releasing", time.time(), flush=True)
"""


def _holder(folder: Path, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.communicate()


def test_refuse_names_the_holder(tmp_path: Path) -> None:
    proc = _holder(tmp_path, 60)
    try:
        with (
            pytest.raises(host_lock.HostBusy, match=rf"study 'held' \(pid {proc.pid}"),
            host_lock.timing_lock("a trial", "refuse", directory=tmp_path),
        ):
            pass
    finally:
        _stop(proc)


def test_wait_says_who_once_then_runs_after_the_holder(tmp_path: Path) -> None:
    proc = _holder(tmp_path, 1.5)
    said: list[str] = []
    with host_lock.timing_lock("a trial", "wait", said.append, directory=tmp_path):
        entered = time.time()
    out, _ = proc.communicate()
    released = float(out.split("releasing")[1])
    assert entered >= released  # the waiter ran only once the holder let go
    assert len(said) == 1 and "study 'held'" in said[0] and "waiting" in said[0]


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    proc = _holder(tmp_path, 60)
    _stop(proc)
    with host_lock.timing_lock("a trial", "refuse", directory=tmp_path):
        assert host_lock.read_holder(tmp_path) is not None
    assert host_lock.read_holder(tmp_path) is None


def test_off_takes_no_lock_and_bad_modes_name_the_key(tmp_path: Path) -> None:
    proc = _holder(tmp_path, 60)
    try:
        with host_lock.timing_lock("a trial", "off", directory=tmp_path):
            pass
    finally:
        _stop(proc)
    with pytest.raises(ConfigError, match=r"trial\.host_lock=sometimes"):
        host_lock.check_mode("trial.host_lock", "sometimes")
