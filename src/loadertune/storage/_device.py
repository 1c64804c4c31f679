"""A simulated storage device whose budget is shared by every process that reads from it.

A real disk does not give each DataLoader worker its own bandwidth: workers queue for one
device. So the device's state lives in a small file (on ``/dev/shm`` where there is one) that
every reader opens by path, and each read is scheduled on it under an ``fcntl`` record lock.
That works the same for forked, spawned and forkserver workers, needs no server process and
no shared-memory registry, and a crashed reader cannot leave it locked (the kernel drops a
process's record locks when it exits).

The model: ``queue_depth`` reads can be in service at once; each waits ``latency_ms`` (a seek
and rotation, or a network round trip) and then transfers its bytes over one channel of
``bandwidth_mb_s`` shared by all reads in first-come order. So adding readers hides latency
until the channel is busy, and then stops helping. Times are ``CLOCK_MONOTONIC``, which all
processes on a host share.

Rare stalls (an object store's cold miss, a network disk's retransmit): with ``stall_every``
N > 0, about one read in N (chosen by a hash of the device's read count, so the same reads stall
in every trial whichever worker makes them) waits ``stall_ms`` more in its slot. Most reads are
quick and a few are very slow: the heavy tail that a median read time, or a short window,
hides, and that in-order batches wait for.
"""

from __future__ import annotations

import fcntl
import os
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# channel free at, reads, bytes, channel-busy seconds, slot-held seconds; one "free at" a slot.
_HEADER = struct.Struct("<ddddd")
_SLOTS = _HEADER.size // 8


@dataclass(frozen=True)
class Stall:
    """About one read in ``every`` (0: none) waits ``ms`` more than the device's latency."""

    every: int = 0
    ms: float = 0.0

    def extra_s(self, read_index: int) -> float:
        """The extra wait, in seconds, of the device's read number ``read_index``."""
        if self.every <= 0 or self.ms <= 0:
            return 0.0
        return self.ms / 1000.0 if _mix(read_index) % self.every == 0 else 0.0


def _mix(n: int) -> int:
    """A 64-bit hash of ``n`` (splitmix64's finaliser): consecutive reads stall independently."""
    z = (n + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class DeviceCounters:
    """What the device has served since it was created."""

    reads: int
    bytes: int
    busy_s: float  # seconds the shared channel was transferring
    held_s: float  # slot-seconds reads held (latency, queueing for the channel, transfer)


class SharedDevice:
    """A handle on the device state file; picklable, so each worker reopens it by path."""

    def __init__(
        self,
        state_path: str | Path,
        latency_ms: float,
        bandwidth_mb_s: float,
        queue_depth: int,
        stall: Stall | None = None,
    ) -> None:
        self.state_path = str(state_path)
        self.latency_s = latency_ms / 1000.0
        self.seconds_per_byte = 1.0 / (bandwidth_mb_s * 1e6)
        self.queue_depth = queue_depth
        self.stall = stall or Stall()
        self._layout = struct.Struct(f"<{_SLOTS + queue_depth}d")
        self._fd: int | None = None
        self._pid = 0
        self._lock = threading.Lock()

    @classmethod
    def create(
        cls,
        state_path: Path,
        latency_ms: float,
        bandwidth_mb_s: float,
        queue_depth: int,
        stall: Stall | None = None,
    ) -> SharedDevice:
        """Write a fresh, idle device state at ``state_path`` and return a handle on it."""
        device = cls(state_path, latency_ms, bandwidth_mb_s, queue_depth, stall)
        tmp = state_path.with_name(state_path.name + ".tmp")
        tmp.write_bytes(device._layout.pack(*([0.0] * (_SLOTS + queue_depth))))
        os.replace(tmp, state_path)
        return device

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_fd=None, _pid=0, _lock=None, _layout=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._layout = struct.Struct(f"<{_SLOTS + self.queue_depth}d")

    def read(self, nbytes: int) -> float:
        """Book a read of ``nbytes`` now; return the monotonic time at which it completes."""
        with self._lock:
            fd = self._open()
            fcntl.lockf(fd, fcntl.LOCK_EX)
            try:
                state = [float(v) for v in self._layout.unpack(os.pread(fd, self._layout.size, 0))]
                done = schedule(
                    state,
                    time.monotonic(),
                    nbytes,
                    self.latency_s,
                    self.seconds_per_byte,
                    self.stall.extra_s(int(state[1])),
                )
                os.pwrite(fd, self._layout.pack(*state), 0)
            finally:
                fcntl.lockf(fd, fcntl.LOCK_UN)
        return done

    def counters(self) -> DeviceCounters:
        """Reads, bytes and channel-busy seconds so far (all processes together)."""
        with self._lock:
            fd = self._open()
            fcntl.lockf(fd, fcntl.LOCK_SH)
            try:
                _, reads, nbytes, busy, held = _HEADER.unpack(os.pread(fd, _HEADER.size, 0))
            finally:
                fcntl.lockf(fd, fcntl.LOCK_UN)
        return DeviceCounters(int(reads), int(nbytes), busy, held)

    def close(self) -> None:
        """Close this process's descriptor (reopened on next use)."""
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None

    def _open(self) -> int:
        # A descriptor inherited through fork is reopened: record locks belong to a process,
        # but sharing one open file between processes is not what each of them expects.
        if self._fd is None or self._pid != os.getpid():
            self._fd = os.open(self.state_path, os.O_RDWR)
            self._pid = os.getpid()
        return self._fd


def schedule(
    state: list[float],
    now: float,
    nbytes: int,
    latency_s: float,
    seconds_per_byte: float,
    stall_s: float = 0.0,
) -> float:
    """Book one read on the device ``state`` (updated in place); return when it completes.

    ``state`` is [channel free at, reads, bytes, busy seconds, held seconds, slot 0 free at,
    ...]. The read takes the slot that frees first, waits out the latency there, then
    transfers when the shared channel is free, holding its slot until the transfer ends. A
    stall (``stall_s``) then holds the read and its slot, not the channel: a cold miss on one
    object does not delay the bytes of the others in flight.
    """
    slots = state[_SLOTS:]
    slot = min(range(len(slots)), key=slots.__getitem__)
    started = max(now, slots[slot])
    transfer_s = nbytes * seconds_per_byte
    state[0] = max(started + latency_s, state[0]) + transfer_s
    done = state[0] + stall_s
    state[1] += 1
    state[2] += nbytes
    state[3] += transfer_s
    state[4] += done - started
    state[_SLOTS + slot] = done
    return done


def wait_until(deadline: float) -> None:
    """Sleep until the monotonic clock reaches ``deadline`` (no CPU held while waiting)."""
    remaining = deadline - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)
