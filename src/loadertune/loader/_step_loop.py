"""The training loop a trial times: pull a batch, copy it to the device, step the model."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from loadertune import _torch_private
from loadertune._lazy import torch
from loadertune.errors import ConfigError
from loadertune.loader._build import tensors_in, to_device
from loadertune.measure import HostCopyTimer, StepRecord, StepTimer
from loadertune.record import REASONS, TrialFailure, step_failure, worker_death


def synchronizer(device: Any) -> Callable[[], None]:
    """Wait for queued device work, so timed regions end when the work does."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def _dead_worker(it: Any, err: RuntimeError) -> TrialFailure | None:
    """The failure a batch lost to a dead worker stands for, read from the workers' exit codes
    (PyTorch's "exited unexpectedly" names no signal); None when every worker is alive."""
    reason = worker_death(w.exitcode for w in _torch_private.worker_processes(it))
    if reason is None:
        return None
    return TrialFailure(reason, f"{REASONS[reason]}: {err}")


def _dotted(collate: Any) -> str | None:
    """The collate's dotted path, as ``loader.collate_fn`` names it; None for PyTorch's."""
    if collate is None or collate is torch.utils.data.default_collate:
        return None
    return f"{getattr(collate, '__module__', '?')}.{getattr(collate, '__qualname__', collate)}"


def step_name(step_fn: Callable[[Any], None]) -> str:
    """How a person names the step: ``model._target_=<factory>`` for their own, else its class
    (``SimulatedStep``, ``RealStep``) or function; through a rank's pacing wrapper."""
    inner = getattr(step_fn, "lazy", step_fn)
    target = getattr(getattr(inner, "cfg", None), "target", None) or getattr(inner, "target", None)
    if isinstance(target, str):
        return f"model._target_={target}"
    return str(getattr(step_fn, "__qualname__", type(step_fn).__qualname__))


class StepLoop:
    """Pull batches (starting a new epoch when one runs out), copy them, step the model.

    Each step ends synchronised with the device; ``copies`` times the host-to-device copy
    (with CUDA events on a GPU, so the copy is not forced to finish before the step starts).
    """

    def __init__(
        self,
        loader: Any,
        device: Any,
        non_blocking: bool,
        step_fn: Callable[[Any], None],
        copies: HostCopyTimer,
        count: Callable[[Any, str | None], int],
    ) -> None:
        self.loader = loader
        self.device = device
        self.non_blocking = non_blocking
        self.step_fn = step_fn
        self.copies = copies
        self.sync = copies.sync
        self.count = count  # a batch's samples, or a ConfigError naming the collate
        self.collate = _dotted(getattr(loader, "collate_fn", None))
        self.epochs = 0
        self.reopened = 0  # passes opened inside the timed window (see ``discard``)
        self._it: Any = None
        self._pending: Any = None

    def _next(self) -> Any:
        if self._it is None:
            self._it = iter(self.loader)
            self.epochs += 1
        try:
            try:
                return next(self._it)
            except StopIteration:
                self._it = iter(self.loader)
                self.epochs += 1
                return self._first_of_pass()
        except RuntimeError as err:
            failure = _dead_worker(self._it, err)
            if failure is None:
                raise
            raise failure from err

    def _first_of_pass(self) -> Any:
        """The first batch of a pass just opened; a pass with none would loop for ever."""
        try:
            return next(self._it)
        except StopIteration:
            raise ConfigError(
                "loader.batch_size",
                getattr(self.loader, "batch_size", None),
                "is more than a whole pass over the dataset yields (no batch in a pass)",
                "lower loader.batch_size, set loader.drop_last=false, or use more data",
            ) from None

    def first_batch(self, timer: StepTimer | None = None) -> float:
        """Seconds from creating the iterator to the first batch; the batch is then trained on
        (its step marked on ``timer``, a throwaway one by default)."""
        start = time.perf_counter()
        self._pending = self._next()
        elapsed = time.perf_counter() - start
        self.step(timer or StepTimer())
        return elapsed

    def step(self, timer: StepTimer) -> StepRecord:
        timer.start()
        if self._pending is not None:
            batch, self._pending = self._pending, None
        else:
            batch = self._next()
        timer.batch_ready()
        self.copies.start()
        batch = to_device(batch, self.device, self.non_blocking)  # whatever the collate made
        self.copies.stop(*tensors_in(batch))
        timer.copied()
        try:
            self.step_fn(batch)
        except (ConfigError, TrialFailure):  # a factory refused, a guard: already named
            raise
        except Exception as err:  # the user's model or step, not the dataset
            raise step_failure(step_name(self.step_fn), err) from err
        self.sync()
        return self.copies.finish(timer, timer.stepped(self.count(batch, self.collate)))

    def discard(self, timer: StepTimer) -> None:
        """Take the timer's last step out of the window: it met the end of an iterable's pass
        and waited for the next pass's start-up, an epoch boundary and not a stall."""
        timer.discard_last()
        self.reopened += 1

    def close(self) -> None:
        """Shut the workers down now rather than at garbage collection."""
        _torch_private.shutdown_workers(self._it)
        self._it = None
