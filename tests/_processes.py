"""Processes a test looks for or starts beside it: a sweep's tree found by its output path, a
zombie told from a live process, CPU hogs outside the test's tree."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psutil


def processes_under(path: Path) -> list[psutil.Process]:
    """Live processes whose command line mentions ``path`` (a sweep, its trials, workers)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if any(str(path) in part for part in (p.info["cmdline"] or [])):
            found.append(p)
    return found


def zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@contextmanager
def cpu_hogs(count: int) -> Iterator[None]:
    """``count`` neighbours spinning on a CPU, outside this process's tree (their shell
    exits, so they are no descendant the meter would count as the loader's)."""
    line = subprocess.run(
        ["sh", "-c", " ".join(["yes >/dev/null 2>&1 </dev/null & echo $!;"] * count)],
        capture_output=True, text=True, check=True, timeout=300,
    ).stdout  # fmt: skip
    pids = [int(pid) for pid in line.split()]
    try:
        yield
    finally:
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
