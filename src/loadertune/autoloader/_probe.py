"""One probe loader: built with ``build_dataloader`` on the plan's queue, watched for faults.

A probe whose workers crash, hang past the limit or outgrow the memory limit raises
:class:`ProbeFault` from :meth:`Probe.next`; its undelivered batches go back to the plan.
A probe's workers are taken off PyTorch's SIGCHLD handler, which would otherwise raise a
dead worker's error wherever the training process happens to be (inside the user's step);
the iterator's own checks then report it from ``next()``, where AutoLoader can catch it.

A batch unpickled while its worker dies fails with the transfer's own error, not PyTorch's
``RuntimeError``: a tensor's storage comes over the worker's ``resource_sharer`` socket
(``rebuild_storage_fd``), which resets (``ConnectionResetError``, ``EOFError``) or is gone
(``FileNotFoundError``, ``ConnectionRefusedError``) before the worker is seen dead. Such an
error, raised inside the transfer, is the probe's fault too; the same types raised by the
dataset's own code (re-raised from a worker) are the user's and propagate.
"""

from __future__ import annotations

import os
import time
import warnings
from types import TracebackType
from typing import TYPE_CHECKING, Any

import psutil

from loadertune import _torch_private
from loadertune.autoloader._plan import IndexPlan, PlanSampler
from loadertune.autoloader._schedule import Setting
from loadertune.loader import accelerator_available

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch
    from torch.utils.data import DataLoader, Dataset


class ProbeFault(Exception):
    """A probe's workers crashed, hung or exceeded memory; the probe is dropped."""


FETCH_ERRORS = (RuntimeError, OSError, EOFError)  # PyTorch's, and a dying worker's transfer's
TRANSFER_MODULES = ("multiprocessing.", "torch.multiprocessing.")  # where a transfer fails
DEATH_WAIT_S = 2.0  # how long a worker whose transfer broke may take to be seen dead


def from_transfer(err: BaseException) -> bool:
    """True when ``err`` was raised receiving a batch (a worker's socket or queue), not by the
    dataset: the innermost frame is in ``multiprocessing`` or torch's storage reductions."""
    tb: TracebackType | None = err.__traceback__
    module = ""
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        tb = tb.tb_next
    return module.startswith(TRANSFER_MODULES)


def loader_settings(setting: Setting, batch_size: int, shuffle: bool, drop_last: bool,
                    context: str | None) -> dict[str, Any]:  # fmt: skip
    """The ``LoaderConfig`` keys of a setting, as ``build_dataloader`` and best_loader.yaml take."""
    workers = setting.num_workers
    return {
        "batch_size": batch_size,
        "num_workers": workers,
        "pin_memory": setting.pin_memory,
        "prefetch_factor": setting.prefetch_factor if workers else None,
        "persistent_workers": setting.persistent_workers and workers > 0,
        "multiprocessing_context": context if workers else None,
        "shuffle": shuffle,
        "drop_last": drop_last,
        "non_blocking": True,
    }


class Probe:
    """A DataLoader for one setting, drawing its batches from the plan."""

    def __init__(
        self,
        dataset: Dataset[Any],
        setting: Setting,
        plan: IndexPlan,
        build: Callable[[Setting, PlanSampler, float], DataLoader[Any]],
        timeout_s: float,
        user_timeout_s: float = 0.0,
    ) -> None:
        self.setting = setting
        self.plan = plan
        self.sampler = PlanSampler(plan)
        self.loader = build(setting, self.sampler, timeout_s if setting.num_workers else 0.0)
        self.timeout_s = timeout_s
        self.user_timeout_s = user_timeout_s  # the DataLoader ``timeout`` the user passed
        self._it: Any = None

    def start(self, guarded: bool) -> None:
        """Start (or, with persistent workers, restart) an epoch's iterator.

        ``guarded``: a probe, whose dead workers must surface in ``next()``.

        Raises:
            ProbeFault: a guarded probe's workers died while starting, or idle since its
                last round (PyTorch would wait 5 s for their answer before saying so).
        """
        lost = self.lost_workers() if guarded else ""
        if lost:
            raise ProbeFault(lost)
        self.sampler.open = True
        self.loader.generator = self.plan.worker_seeds()  # fresh workers: streams of their own
        try:
            with warnings.catch_warnings():  # more workers than cores is what I/O needs
                warnings.filterwarnings("ignore", message="This DataLoader will create")
                self._it = iter(self.loader)
        except RuntimeError as err:  # a worker died before it left PyTorch's SIGCHLD handler
            if not guarded or not self.setting.num_workers:
                raise
            raise ProbeFault(f"workers failed to start: {err}") from err
        if guarded and self.setting.num_workers:
            _torch_private.unwatch_workers(self._it)

    def drain(self) -> None:
        """Hand out no more batches: the iterator ends once those in flight are delivered."""
        self.sampler.open = False

    def abandon(self) -> None:
        """End the iterator and give back every batch it was handed and did not deliver, to
        go after a tail's (:mod:`._tail`); persistent workers stay for the next start,
        which discards what they still load (PyTorch's resume of a persistent iterator)."""
        self._it = None
        self.sampler.release()

    def unguard(self, timeout_s: float) -> None:
        """Keep this probe as the settled loader: the user's timeout, PyTorch's SIGCHLD check."""
        self.loader.timeout = timeout_s
        pool = _torch_private.persistent_iterator(self.loader)
        if pool is not None:
            _torch_private.set_timeout(pool, timeout_s)
            _torch_private.watch_workers(pool)

    @property
    def running(self) -> bool:
        """An epoch's iterator is live (False before the first, after one ends or drains)."""
        return self._it is not None

    def next(self) -> Any:
        """The next batch, marked delivered in the plan.

        Raises:
            StopIteration: the plan's queue is empty and every batch handed out arrived.
            ProbeFault: a worker died or the batch took longer than the limit.
        """
        started = time.monotonic()
        try:
            batch = next(self._it)
        except StopIteration:
            self._it = None
            raise
        except FETCH_ERRORS as err:
            fault = self._fault(time.monotonic() - started, err)
            if fault is not None:
                raise ProbeFault(fault) from err
            if not _timed_out(err):
                self.sampler.deliver_next()  # the dataset's error: its batch is spent
            raise
        except Exception:
            self.sampler.deliver_next()  # the dataset's error, as a DataLoader's iterator goes on
            raise
        self.sampler.deliver_next()
        return batch

    def _fault(self, waited_s: float, err: BaseException) -> str | None:
        """Why the probe failed, when the error is its workers' and not the dataset's.

        A broken transfer comes before the dying worker is reaped: wait a moment for it."""
        transfer = not isinstance(err, RuntimeError) and from_transfer(err)
        if not isinstance(err, RuntimeError) and not transfer:
            return None  # the dataset's own OSError or EOFError, re-raised from a worker
        workers = _torch_private.worker_processes(self._it)
        deadline = time.monotonic() + (DEATH_WAIT_S if transfer else 0.0)
        while True:
            dead = [w for w in workers if not w.is_alive()]
            if dead or time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        if dead:
            return _exits(dead)
        if transfer:
            return f"a batch could not be received from its worker ({type(err).__name__}: {err})"
        if self.user_timeout_s and self.user_timeout_s <= self.timeout_s:
            return None  # the user's own timeout: raised as a DataLoader raises it
        if self.setting.num_workers and self.timeout_s and waited_s >= 0.95 * self.timeout_s:
            return f"no batch within {self.timeout_s:.0f} s (hung)"
        return None

    def lost_workers(self) -> str:
        """Why the idle pool of persistent workers cannot serve another round: a worker that
        exited while it waited (killed, out of memory); "" when every one lives, or none."""
        pool = None if self._it else _torch_private.persistent_iterator(self.loader)
        dead = [w for w in _torch_private.worker_processes(pool) if not w.is_alive()]
        return f"{_exits(dead)} while idle between rounds" if dead else ""

    def worker_pids(self) -> list[int]:
        """The workers' pids, running or idle between rounds (persistent workers)."""
        it = self._it or _torch_private.persistent_iterator(self.loader)
        workers = _torch_private.worker_processes(it)
        return [w.pid for w in workers if w.pid is not None and w.is_alive()]

    def close(self, kill: bool = False) -> None:
        """Stop the workers and give undelivered batches back to the plan.

        ``kill``: a failed probe's workers are terminated first, so a hung one does not hold
        the training loop for PyTorch's join timeout (5 s a worker).
        """
        it, self._it = self._it, None
        pool = _torch_private.persistent_iterator(self.loader)  # persistent workers live there
        if kill:
            for worker in _torch_private.worker_processes(it or pool):
                if worker.is_alive():
                    worker.terminate()
        _torch_private.shutdown_workers(it)
        if pool is not it:
            _torch_private.shutdown_workers(pool)
        _torch_private.forget_persistent_iterator(self.loader)
        self.sampler.release()

    def end_epoch(self) -> None:
        """The epoch ended or was abandoned: forget what was handed out, keep the workers."""
        self._it = None
        self.sampler.handed, self.sampler.delivered = [], 0


def _timed_out(err: BaseException) -> bool:
    """``DataLoader``'s own timeout error: no batch arrived, none was spent."""
    return isinstance(err, RuntimeError) and str(err).startswith("DataLoader timed out after")


def _exits(dead: list[Any]) -> str:
    """The dead workers, as a probe's failure names them."""
    codes = sorted({w.exitcode for w in dead}, key=str)
    return f"worker(s) {[w.pid for w in dead]} exited (exit code {codes})"


def tree_usage(pids: list[int]) -> tuple[float, float]:
    """(CPU seconds, resident MB) of this process and the given workers, as psutil reads them."""
    cpu, rss = 0.0, 0.0
    for pid in [os.getpid(), *pids]:
        try:
            proc = psutil.Process(pid)
            t = proc.cpu_times()
            cpu += t.user + t.system
            rss += proc.memory_info().rss / 2**20
        except psutil.Error:
            continue
    return cpu, rss


def device_of(device: torch.device | str | None) -> bool:
    """True when batches go to an accelerator, so pin_memory is worth probing."""

    return accelerator_available(device)
