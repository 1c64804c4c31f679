"""The command ends as ``sys.exit`` would, without Python's module teardown: the same status,
every atexit handler run, threads joined, and buffered output flushed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from loadertune.guards._process_end import exit_status

PROGRAM = """
import atexit, sys, threading, time
from loadertune.guards._process_end import end
atexit.register(lambda: print("handler ran", flush=True))
def late():
    time.sleep(0.2)
    print("thread done", end=" ")
threading.Thread(target=late).start()
print("buffered", end=" ")  # no newline, no flush: the end must flush it
end({code})
"""


@pytest.mark.parametrize(("code", "status"), [("None", 0), ("3", 3), ("'why'", 1)])
def test_the_end_keeps_the_status_the_handlers_and_the_output(code: str, status: int) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM.format(code=code)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == status
    assert done.stdout == "buffered thread done handler ran\n"
    assert done.stderr == ("why\n" if status == 1 else "")


def test_exit_status_follows_sys_exit() -> None:
    assert [exit_status(c) for c in (None, 0, 5, True)] == [0, 0, 5, 1]
