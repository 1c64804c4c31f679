"""A light process beside the trial that samples its process tree: CPU often, memory rarely.

Sampling from a thread inside the training process cost the figure it measured (+4% to +11%
against a bare loop at 10 samples a second): the thread took the GIL and a share of the CPUs
from the loop. Here a separate interpreter (psutil only, no torch) samples the tree's CPU at
``trial.sample_hz`` and reads memory (PSS, the costly part) only as often as keeps its own
cost within ``MEMORY_CPU_SHARE`` of one core, and once more at the end. It leaves itself out
of the tree, and the trial sets its CPU apart from the tree's over the timed window.

The trial starts it with :class:`TreeSampler`; it stops when its standard input closes (so
it never outlives the trial, however the trial ends) and then writes its samples to its
standard output as one JSON document.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from loadertune.machine._monitor import ProcessTreeMonitor, ResourceSample

MEMORY_CPU_SHARE = 0.005  # memory readings may take at most this share of one core
REFRESH_S = 0.5  # the tree's members are listed again at most this often


@dataclass
class SamplerReport:
    """What the sampler saw: its samples and the memory metric it could read."""

    samples: list[ResourceSample] = field(default_factory=list)
    memory_metric: str = "pss"


class TreeSampler:
    """Runs ``python -m loadertune.machine._tree_sampler`` on ``root_pid``'s tree (this process by
    default).

    Use as a context manager; ``report`` holds the samples once it has exited.
    """

    def __init__(self, hz: float, root_pid: int | None = None) -> None:
        self.hz = hz
        self.root_pid = root_pid or os.getpid()
        self.report = SamplerReport()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The sampler's own process id (None before it starts)."""
        return self._proc.pid if self._proc is not None else None

    def __enter__(self) -> TreeSampler:
        here = str(Path(__file__).resolve().parents[2])  # this loadertune, wherever it is
        path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "loadertune.machine._tree_sampler",
                str(self.root_pid),
                str(self.hz),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": path},
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> SamplerReport:
        """Ask for the final sample, wait for the report (once; later calls return it).

        The request is a line, not only the end of input: workers forked since the sampler
        started hold copies of the pipe's write end until they exit.
        """
        proc, self._proc = self._proc, None
        if proc is None:
            return self.report
        try:
            out, _ = proc.communicate(b"stop\n", timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return self.report
        with contextlib.suppress(ValueError):
            data = json.loads(out or b"{}")
            self.report = SamplerReport(
                [ResourceSample(*row) for row in data.get("samples", [])],
                data.get("memory_metric", "pss"),
            )
        return self.report


def sample_until_stopped(root: int, hz: float) -> SamplerReport:
    """Sample ``root``'s tree (less this process) until standard input closes or says so."""
    monitor = ProcessTreeMonitor(root, exclude={os.getpid()}, refresh_s=REFRESH_S)
    interval = 1.0 / hz
    next_memory = 0.0
    next_tick = time.perf_counter() + interval
    while not _stop_asked(max(next_tick - time.perf_counter(), 0.0)):
        now = time.perf_counter()
        next_tick += interval
        if next_tick < now:  # fallen behind (a busy machine): no burst to catch up
            next_tick = now + interval
        if now < next_memory:
            if monitor.sample(memory=False) is None:
                break
            continue
        cpu = time.process_time()
        if monitor.sample(memory=True) is None:
            break
        cost = time.process_time() - cpu
        next_memory = now + max(interval, cost / MEMORY_CPU_SHARE)
    monitor.relist()  # the final sample sees every member alive now
    with contextlib.suppress(Exception):  # the tree may be gone: keep what was seen
        monitor.sample(memory=True)
    return SamplerReport(monitor.samples, monitor.memory_metric)


def _stop_asked(timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for standard input: closed or any line means stop."""
    ready, _, _ = select.select([sys.stdin], [], [], timeout)
    return bool(ready)


def main(argv: list[str]) -> None:
    """``python -m loadertune.machine._tree_sampler ROOT_PID HZ``: sample, then print the report as
    JSON.

    Ctrl-C is the trial's to handle (it reaches the whole process group): the sampler ends
    when the trial closes its input. A trial that ended without reading the report (killed,
    interrupted) has closed the pipe: nothing is left to say, and nothing is printed.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    root, hz = int(argv[0]), float(argv[1])
    report = sample_until_stopped(root, hz)
    rows = [[s.t, s.cpu_percent, s.memory_bytes, s.rss_bytes, s.processes] for s in report.samples]
    try:
        json.dump({"samples": rows, "memory_metric": report.memory_metric}, sys.stdout)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit


if __name__ == "__main__":
    main(sys.argv[1:])
