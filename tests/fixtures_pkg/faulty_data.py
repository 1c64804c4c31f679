"""Datasets that really fail, for fault-injection tests: each ``mode`` breaks one way.

Failures trigger from item ``at`` on, in a DataLoader worker (or, for ``kill_trial``, in the
trial's own process), so the trial has started and measured a little before it breaks.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from typing import Any

import torch

_LEAK: list[bytearray] = []


class Faulty(torch.utils.data.Dataset[tuple[torch.Tensor, int]]):
    """``length`` small vectors; misbehaves according to ``mode``.

    Modes: ok, slow (sleeps ``delay_s`` per item), raise (ValueError on every item, in any
    process), raise_on_rank1 (ValueError from the ``at``-th item one process of rank 1 of a
    multi-rank trial reads: the rank without workers, else a worker), corrupt (ValueError
    naming the index, one late item in seven), segfault, sigbus,
    sigkill_worker, hang (in a worker), leak (keeps ``leak_mb`` per item in a worker),
    unpicklable (holds a lambda: fails under spawn), kill_trial (SIGKILLs the trial's own
    process; use with num_workers=0), exit_trial (the trial's process exits with status 3).
    """

    def __init__(
        self,
        mode: str = "ok",
        length: int = 400,
        dim: int = 16,
        at: int = 12,
        leak_mb: int = 40,
        delay_s: float = 0.0,
    ) -> None:
        self.mode = mode
        self.length = length
        self.dim = dim
        self.at = at
        self.leak_mb = leak_mb
        self.delay_s = delay_s
        self.num_classes = 2
        self._calls = 0
        self._pid, self._here = 0, 0
        self.hook: Any = (lambda: None) if mode == "unpicklable" else None

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        self._calls += 1
        in_worker = torch.utils.data.get_worker_info() is not None
        late = self._calls > self.at
        mode = self.mode
        if mode == "raise":
            raise ValueError(f"corrupt record {index}")
        if mode == "raise_on_rank1" and os.environ.get("RANK") == "1":
            if self._pid != os.getpid():  # items read in this process, rank or worker
                self._pid, self._here = os.getpid(), 0
            self._here += 1
            if self._here > self.at:
                raise ValueError(f"corrupt record {index} on rank 1")
        if mode == "corrupt" and late and index % 7 == 3:  # the message names each record
            raise ValueError(f"corrupt record at index {index}")
        if mode == "slow":
            time.sleep(self.delay_s)
        if late and in_worker:
            if mode == "segfault":
                ctypes.string_at(0)
            elif mode == "sigbus":
                os.kill(os.getpid(), signal.SIGBUS)
            elif mode == "sigkill_worker":
                os.kill(os.getpid(), signal.SIGKILL)
            elif mode == "hang":
                time.sleep(3600)
            elif mode == "leak":
                block = bytearray(self.leak_mb * 2**20)
                block[::4096] = b"x" * len(block[::4096])
                _LEAK.append(block)
                time.sleep(0.05)  # grow at a pace a sampling guard can follow
        if late and not in_worker and mode == "exit_trial":
            os._exit(3)  # the trial's own process ends with an error status, no Python error
        if late and not in_worker and mode == "kill_trial":
            os.kill(os.getpid(), signal.SIGKILL)
        return torch.full((self.dim,), float(index)), index % 2
