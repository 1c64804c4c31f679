"""What the trial process sees of its ranks while they run: their beats, steps, processes.

Every rank writes to a small shared array (:class:`Board`): its pid, the instant of its
latest progress (each phase of each step), and whether it is waiting for the others in a
collective. A rank that hangs stops beating outside a collective while the others wait in
one, so the hung rank is the one not waiting, the oldest beat among several
(:func:`hung_rank`); which rank beat last says nothing by itself when every rank starves
for a CPU. :class:`Watchdog` reads the board a few times a
second in the trial process: once no rank has beaten past the limit it names the hung rank
and kills every rank (the others could only wait for it until a collective's timeout; the
launcher then reports them), and it remembers every process of the trial's tree, for the
clean-up after it. A rank that raises or dies is the launcher's to notice; the board tells
a rank that fails whether another failed before it (:meth:`Board.failed_before`).
:class:`StepForwarder` hands the node's steps that rank 0 sends to the trial's ``on_step``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psutil

from loadertune.ranks.adoption import reap

_FIELDS = 4  # pid, last beat (perf_counter, the same clock in every process), failed at, waiting
POLL_S = 0.2


class Board:
    """Shared doubles, four per rank; made before the ranks fork, written by each rank."""

    def __init__(self, ctx: Any, world: int) -> None:
        self.world = world
        self.values = ctx.Array("d", world * _FIELDS, lock=False)

    def started(self, rank: int) -> None:
        """The rank runs: its pid, and a first beat."""
        self.values[rank * _FIELDS] = float(os.getpid())
        self.beat(rank)

    def beat(self, rank: int) -> None:
        """The rank made progress now, on its own work."""
        self.values[rank * _FIELDS + 3] = 0.0
        self.values[rank * _FIELDS + 1] = time.perf_counter()

    def waiting(self, rank: int) -> None:
        """The rank's own work is done and it now waits for the others in a collective."""
        self.values[rank * _FIELDS + 1] = time.perf_counter()
        self.values[rank * _FIELDS + 3] = 1.0

    def failed(self, rank: int) -> None:
        """The rank is raising now (the first to raise is the cause, the others follow it);
        the first stamp stays, as the error passes outward through more handlers."""
        if not self.values[rank * _FIELDS + 2]:
            self.values[rank * _FIELDS + 2] = time.perf_counter()

    def beats(self) -> list[float]:
        """Each rank's latest beat (0.0: not started)."""
        return [self.values[r * _FIELDS + 1] for r in range(self.world)]

    def waits(self) -> list[bool]:
        """Whether each rank is waiting in a collective since its latest beat."""
        return [self.values[r * _FIELDS + 3] > 0.0 for r in range(self.world)]

    def pid(self, rank: int) -> int:
        """The rank's process id (0 before it started)."""
        return int(self.values[rank * _FIELDS])

    def failed_at(self, rank: int) -> float:
        """When the rank started raising (0.0: it did not)."""
        return float(self.values[rank * _FIELDS + 2])

    def failed_before(self, rank: int) -> int | None:
        """Another rank that failed before ``rank``: it stamped first, or its process is gone
        (a rank that dies without a Python error never stamps)."""
        mine = self.failed_at(rank) or time.perf_counter()
        for other in range(self.world):
            stamp, pid = self.failed_at(other), self.pid(other)
            if other != rank and ((0.0 < stamp < mine) or (pid and not _alive(pid))):
                return other
        return None

    def reaped(self, rank: int) -> bool:
        """The rank's process is gone from the process table: its parent, the launcher's
        agent, has collected its exit (and with it, the trial's cause)."""
        pid = self.pid(rank)
        return pid > 0 and not psutil.pid_exists(pid)


def hung_rank(
    beats: Sequence[float], now: float, limit_s: float, waits: Sequence[bool] = ()
) -> int | None:
    """The rank holding the node once no rank has beaten for ``limit_s``.

    A rank waiting in a collective (``waits``) is held by another, so the hung rank is one
    that is not; among several, the oldest beat (when every rank waits, the oldest beat of
    all). Nothing before any rank has beaten (the ranks are still starting).
    """
    if not any(beats) or now - max(beats) <= limit_s:
        return None
    ranks = range(len(beats))
    working = [r for r in ranks if not (r < len(waits) and waits[r])] or list(ranks)
    return min(working, key=lambda r: beats[r])


class Watchdog:
    """A thread in the trial process: kills a hung rank, keeps the tree's processes in view."""

    def __init__(self, board: Board, limit_s: float) -> None:
        self.board = board
        self.limit_s = limit_s
        self.hung: tuple[int, float] | None = None  # (rank, seconds silent) once killed
        self.seen: dict[int, psutil.Process] = {}
        self.adopted: set[int] = set()  # a dead rank's leftovers, killed, not yet reaped
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loadertune-ranks", daemon=True)
        self._root = psutil.Process()
        self._before = {p.pid for p in self._root.children()}  # the caller's, not the trial's

    def __enter__(self) -> Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._look()
        self._stop_orphans()

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            self._look()
            self._stop_orphans()
            if self.hung is not None:
                continue
            beats = self.board.beats()
            now = time.perf_counter()
            rank = hung_rank(beats, now, self.limit_s, self.board.waits())
            if rank is not None and _alive(self.board.pid(rank)):  # a dead one: the launcher's
                self.hung = (rank, now - max(beats))
                for other in range(self.board.world):  # they could only wait for it
                    if _alive(pid := self.board.pid(other)):
                        with contextlib.suppress(OSError):
                            os.kill(pid, signal.SIGKILL)

    def _look(self) -> None:
        """Keep every process of the trial's tree in view, the caller's own left out."""
        with contextlib.suppress(psutil.Error):
            for proc in self._root.children(recursive=True):
                if proc.pid not in self._before:
                    self.seen.setdefault(proc.pid, proc)

    def _stop_orphans(self) -> None:
        """Kill what a dead rank left running (its DataLoader workers, come back to the trial
        process: :mod:`.adoption`), and collect the exits of those already killed."""
        self.adopted = reap(self.adopted)
        ranks = {self.board.pid(r) for r in range(self.board.world)}
        if 0 in ranks or all(_alive(pid) for pid in ranks):
            return
        with contextlib.suppress(psutil.Error):
            for proc in self._root.children():
                if proc.pid in ranks or proc.pid in self._before or proc.pid in self.adopted:
                    continue
                self.seen.setdefault(proc.pid, proc)
                self.adopted.add(proc.pid)
                with contextlib.suppress(psutil.Error):
                    proc.kill()

    def survivors(self) -> list[psutil.Process]:
        """Processes of the trial's tree, seen while it ran or now, that still live (same
        process). It looks again first: a process started since the last poll (a worker
        forked as Ctrl-C came) would otherwise outlive the trial, printing after its end."""
        self._look()
        alive = []
        for proc in self.seen.values():
            with contextlib.suppress(psutil.Error):
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
        return alive


def _alive(pid: int) -> bool:
    """``pid`` runs (not exited, not a zombie waiting to be reaped)."""
    try:
        return pid > 0 and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class StepForwarder:
    """A thread passing the node's steps from rank 0 to ``on_step``, through a pipe.

    Only rank 0 writes (no lock a killed rank could leave held); the trial process ends the
    stream with ``None`` on its own copy of the write end, and stops reading at any damage
    (a rank killed half-way through a message).
    """

    def __init__(self, ctx: Any, on_step: Callable[[Any, bool], None] | None) -> None:
        self.reader, self.writer = ctx.Pipe(duplex=False)
        self.on_step = on_step
        self._thread = threading.Thread(target=self._run, name="loadertune-steps", daemon=True)

    def send(self, record: Any, timed: bool) -> None:
        """Rank 0's side: one step of the node."""
        self.writer.send((record, timed))

    def __enter__(self) -> StepForwarder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            self.writer.send(None)
        self._thread.join(timeout=10)
        self.reader.close()
        self.writer.close()

    def _run(self) -> None:
        while True:
            try:
                message = self.reader.recv()
            except Exception:  # a write cut short by a killed rank: nothing more to read
                return
            if message is None:
                return
            if self.on_step is not None:
                try:
                    self.on_step(*message)
                except Exception:  # a sweep that stopped listening: the trial goes on
                    self.on_step = None
