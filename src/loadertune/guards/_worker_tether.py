"""Processes of a trial that die with the process that started them, whenever it dies.

A sweep's trial process dies with the sweep (the kernel's parent-death signal), and its
DataLoader workers normally notice their parent is gone: PyTorch's worker loop compares
``os.getppid()`` with the parent it saw when it started, every 5 s. That check has a hole:
a parent killed while a worker is still starting (before the loop records its parent) leaves
a worker whose recorded parent is already init, so it waits for indices forever, an orphan
holding the sweep's stdout and stderr open; a caller reading them (``loadertune -m | tee``, a
test's ``communicate()``) then never sees them end. :func:`die_with_parent` closes the hole
from inside the child (the kernel's signal first, then the parent checked), and
:func:`tether` has every worker of a trial's loader call it before anything else.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> bool:
    """Have the kernel kill this process when the thread that started it ends; False when
    ``parent`` is already gone (this process was re-parented before the signal was set)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    return os.getppid() == parent


@dataclass(frozen=True)
class TetheredInit:
    """A worker's ``worker_init_fn``: die with ``creator`` (the process iterating the
    loader), then run the loader's own ``inner`` init. Picklable, for ``spawn`` workers."""

    creator: int
    inner: Callable[[int], Any] | None = None

    def __call__(self, worker_id: int) -> None:
        if not die_with_parent(self.creator):
            os._exit(0)  # the trial is gone: nothing would ever read this worker's batches
        if self.inner is not None:
            self.inner(worker_id)


def tether(loader: Any, start_method: str) -> Any:
    """``loader`` with workers that die with this process (the thread iterating it must be
    the one that builds it, as in a trial). Workers a ``forkserver`` starts are the server's
    children, not this process's, and are left as they are."""
    if start_method in ("fork", "spawn") and loader.num_workers > 0:
        loader.worker_init_fn = TetheredInit(os.getpid(), loader.worker_init_fn)
    return loader
