"""Read what the trial's DataLoader workers print, and catch the errors PyTorch only prints.

A worker sends each batch through a ``multiprocessing`` queue whose feeder thread pickles it;
pickling moves each tensor not yet in shared memory into ``/dev/shm`` (a descriptor each).
When that fails (``/dev/shm`` full, too many open files) the feeder thread prints the
traceback (``Queue._on_queue_feeder_error``) and drops the batch: no exception reaches the
training loop, which then waits for a batch that never comes, or finishes on the others.

Every process of the trial writes to file descriptor 2, which workers inherit whatever their
start method: :class:`WorkerOutputWatch` points it at a pipe for the trial, passes everything
on to the real stderr unchanged, and recognises the fatal patterns below. The training
process's own Python ``sys.stderr`` keeps the real terminal (progress bars stay live); forked
children get it back on the pipe. :func:`read_fault` is the pure part: lines in, reason out.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import re
import select
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from loadertune.record import Reason, classify

# Each a sign that a worker lost a batch or is about to die, whoever printed it.
_FATAL: list[tuple[Reason, re.Pattern[str]]] = [
    (
        Reason.SHM_EXHAUSTED,
        re.compile(
            r"unable to allocate shared memory|No space left on device.*shm|"
            r"shm.*No space left|Fatal Python error: Bus error|out of shared memory"
        ),
    ),
    (Reason.FD_EXHAUSTED, re.compile(r"Too many open files")),
    (Reason.WORKER_CRASHED, re.compile(r"Fatal Python error: Segmentation fault")),
]
# A traceback through the queue's feeder thread: the batch it was sending is lost.
_FEEDER = re.compile(r"multiprocessing[/\\]queues\.py\", line \d+, in _feed\b|QueueFeederThread")
_TRACEBACK = "Traceback (most recent call last):"
_LAST_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)\b")
EXCERPT_LINES = 12  # lines of the printed error kept in the failure's message
SETTLE_S = 0.3  # after the first sign, wait this long for the rest of the traceback
_KEEP = 400  # lines of recent output kept to read a traceback back from its start


@dataclass(frozen=True)
class WorkerFault:
    """A fatal error a worker printed: the failure reason and the first lines printed."""

    reason: Reason
    excerpt: str

    def message(self) -> str:
        """The failure's text: what was lost and the fix in one line, then what was printed."""
        fix = _FIXES.get(self.reason, "see the worker's error below")
        return (
            f"a DataLoader worker printed a fatal error and lost its batches; {fix}\n"
            f"what it printed:\n{self.excerpt}"
        )


_FIXES = {
    Reason.SHM_EXHAUSTED: "lower loader.num_workers, loader.prefetch_factor or loader.batch_size, "
    "or enlarge /dev/shm (docker run --shm-size)",
    Reason.FD_EXHAUSTED: "raise the open-file limit (ulimit -n), or lower loader.num_workers or "
    "loader.prefetch_factor",
}


def read_fault(lines: Sequence[str]) -> WorkerFault | None:
    """The first fatal error in ``lines`` (printed output), or None if there is none."""
    for i, line in enumerate(lines):
        reason = _fatal_reason(line)
        if reason is None and not _FEEDER.search(line):
            continue
        start = _block_start(lines, i)
        end = _block_end(lines, i)
        block = [b for b in lines[start:end] if b.strip()]
        if reason is None:
            reason = next((r for b in block if (r := _fatal_reason(b))), None)
        if reason is None:
            reason = classify("", "\n".join(block))
            reason = Reason.WORKER_CRASHED if reason == Reason.DATASET_ERROR else reason
        head = block[:EXCERPT_LINES]
        if len(block) > EXCERPT_LINES:
            head = [*block[: EXCERPT_LINES - 2], "  ...", block[-1]]
        return WorkerFault(reason, "\n".join(head))
    return None


def _fatal_reason(line: str) -> Reason | None:
    return next((reason for reason, pattern in _FATAL if pattern.search(line)), None)


def _block_start(lines: Sequence[str], i: int) -> int:
    """Where the traceback around line ``i`` starts (``i`` itself outside a traceback)."""
    for j in range(i, max(i - 60, -1), -1):
        if lines[j].startswith(_TRACEBACK):
            return j
        if j < i and not lines[j].startswith((" ", "\t")):
            break
    return i


def _block_end(lines: Sequence[str], i: int) -> int:
    """Just past the traceback's last line (``Error: ...``), or a few lines on."""
    for j in range(i, min(i + 60, len(lines))):
        if _LAST_LINE.match(lines[j]):
            return j + 1
    return min(i + 4, len(lines))


class _Scanner:
    """Lines as they arrive; a fault once its traceback is complete or has settled."""

    def __init__(self) -> None:
        self.lines: deque[str] = deque(maxlen=_KEEP)
        self._partial = ""
        self._first_sign: float | None = None
        self.fault: WorkerFault | None = None

    def feed(self, text: str, now: float) -> None:
        *whole, self._partial = (self._partial + text).split("\n")
        for line in whole:
            self.lines.append(line)
            if self._first_sign is None and (_fatal_reason(line) or _FEEDER.search(line)):
                self._first_sign = now

    def due(self, now: float, final: bool = False) -> WorkerFault | None:
        """The fault, once the traceback has had time to arrive (or at the ``final`` read)."""
        if self.fault is not None or self._first_sign is None:
            return None
        ended = _LAST_LINE.match(self.lines[-1]) is not None if self.lines else False
        if final or ended or now - self._first_sign >= SETTLE_S:
            pending = [*self.lines, self._partial] if final else list(self.lines)
            self.fault = read_fault(pending)
        return self.fault


_active: list[TextIO] = []  # the Python stderr on fd 2, while a watch runs (forked children)


def _child_writes_to_fd2() -> None:
    if _active:
        sys.stderr = _active[-1]


os.register_at_fork(after_in_child=_child_writes_to_fd2)


class WorkerOutputWatch:
    """Points fd 2 at a pipe for the trial; a thread passes it on and reads it for faults.

    ``on_fault`` is called once, from a thread of its own, when a fault is seen while the
    trial runs; a fault seen only in the last output is left in ``fault`` for the caller.
    """

    def __init__(self, on_fault: Callable[[WorkerFault], None]) -> None:
        self.on_fault = on_fault
        self.fault: WorkerFault | None = None
        self._scanner = _Scanner()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._pump, name="loadertune-stderr", daemon=True)
        self._saved = self._read = -1
        self._python_stderr: Any = None

    def __enter__(self) -> WorkerOutputWatch:
        _flush(sys.stderr)
        try:
            self._saved = os.dup(2)
        except OSError:  # no fd 2 at all (a daemon, some notebooks): nothing to read
            return self
        self._read, write = os.pipe()
        os.dup2(write, 2)
        os.close(write)
        self._python_stderr = sys.stderr
        if sys.stderr is not None:
            encoding = getattr(sys.stderr, "encoding", None) or "utf-8"
            sys.stderr = open(
                self._saved,
                "w",
                buffering=1,
                encoding=encoding,
                errors="backslashreplace",
                closefd=False,
            )
            _active.append(self._python_stderr)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._saved < 0:
            return
        terminal = sys.stderr
        if self._python_stderr is not None and terminal is not self._python_stderr:
            _flush(terminal)
            sys.stderr = self._python_stderr
            _active.remove(self._python_stderr)
            terminal.close()
        _flush(sys.stderr)
        os.dup2(self._saved, 2)  # this process's write end of the pipe closes here
        self._stop.set()
        self._thread.join(timeout=3)
        os.close(self._read)
        os.close(self._saved)
        if self.fault is None:
            self.fault = self._scanner.fault

    def _pump(self) -> None:
        decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode
        stop_by = None
        while True:
            ready = select.select([self._read], [], [], 0.05)[0]
            now = time.monotonic()
            data = os.read(self._read, 65536) if ready else b""
            if data:
                _write_all(self._saved, data)
                self._scanner.feed(decode(data), now)
            if self._stop.is_set():
                stop_by = stop_by or now + 1.0  # children that linger: stop reading anyway
                if not data or now > stop_by:
                    break
            elif ready and not data:
                break  # every write end closed
            fault = self._scanner.due(now)
            if fault is not None and self.fault is None:
                self.fault = fault
                threading.Thread(target=self.on_fault, args=(fault,), daemon=True).start()
        self._scanner.due(time.monotonic(), final=True)


def _write_all(fd: int, data: bytes) -> None:
    with contextlib.suppress(OSError):
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]


def _flush(stream: Any) -> None:
    with contextlib.suppress(AttributeError, OSError, ValueError):
        stream.flush()
