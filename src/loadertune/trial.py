"""``run_trial``: measure one DataLoader configuration end to end.

A plain function: no Hydra, Optuna or MLflow in here, so tests and the sweep call it directly.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

from loadertune.config import RunConfig
from loadertune.monitor import ProcessTreeMonitor
from loadertune.result import TrialResult
from loadertune.timing import StepRecord, StepTimer, summarize
from loadertune.validation import validate

StepCallback = Callable[[StepRecord, bool], None]
"""Called after every step with the record and whether it was inside the timed window."""


def resolve_device(name: str) -> str:
    """``auto`` picks CUDA when present, else the CPU."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def run_trial(config: RunConfig, on_step: StepCallback | None = None) -> TrialResult:
    """Build the dataset and loader, warm up, then time ``config.trial.steps`` steps.

    The first batch (worker start-up) is always outside the timed window and is reported as
    ``first_batch_s``; ``trial.warmup_steps`` further steps follow before timing starts.

    Raises:
        ConfigError: for settings that cannot work, before any worker starts.
    """
    import torch
    import torch.multiprocessing as mp

    from loadertune.datasets import build_dataset
    from loadertune.loader import build_dataloader, effective_settings
    from loadertune.machine import machine_info
    from loadertune.models import build_train_step, split_batch

    validate(config)
    tc = config.trial
    torch.manual_seed(tc.seed)
    if tc.torch_threads is not None:
        torch.set_num_threads(tc.torch_threads)
    device = torch.device(resolve_device(tc.device))
    dataset = build_dataset(config)
    num_classes = int(getattr(dataset, "num_classes", 0) or 10)
    step_fn = build_train_step(config.model, dataset[0], num_classes, device, config.dataset.name)
    effective = effective_settings(config.loader, device)
    start_method = effective.multiprocessing_context or mp.get_start_method(allow_none=True)
    start_method = start_method or mp.get_all_start_methods()[0]
    if effective.num_workers == 0:
        start_method = "none"
    sync = _synchronizer(device)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = build_dataloader(
            dataset, effective, device, generator=torch.Generator().manual_seed(tc.seed)
        )
        with ProcessTreeMonitor(hz=tc.sample_hz) as monitor:
            loop = _StepLoop(loader, device, effective.non_blocking, step_fn, sync, split_batch)
            measure_start = time.perf_counter()
            first_batch_s = loop.first_batch()
            for _ in range(tc.warmup_steps):
                record = loop.step(StepTimer())
                if on_step:
                    on_step(record, False)
            timer = StepTimer()
            monitor.sample()
            cpu_start = monitor.cpu_seconds
            window_start = time.perf_counter()
            deadline = window_start + tc.time_limit_s
            truncated = False
            for _ in range(tc.steps):
                record = loop.step(timer)
                if on_step:
                    on_step(record, True)
                if time.perf_counter() > deadline:
                    truncated = len(timer.records) < tc.steps
                    break
            window_end = time.perf_counter()
            monitor.sample()
            cpu_window = monitor.cpu_seconds - cpu_start
            loop.close()
        del loader
    cpu_mean = 100.0 * cpu_window / (window_end - window_start)
    peak = max((s.memory_bytes for s in monitor.samples), default=0)
    return TrialResult(
        summary=summarize(timer.records),
        steps=timer.records,
        resources=monitor.samples,
        first_batch_s=first_batch_s,
        peak_memory_mb=peak / 2**20,
        cpu_percent_mean=cpu_mean,
        memory_metric=monitor.memory_metric,
        effective_loader=effective,
        device=str(device),
        start_method=start_method,
        epochs=loop.epochs,
        truncated=truncated,
        machine=machine_info(),
        warnings=sorted({str(w.message) for w in caught}),
        window_start=window_start,
        measure_s=window_end - measure_start,
    )


def _synchronizer(device: Any) -> Callable[[], None]:
    """Wait for queued device work, so timed regions end when the work does."""
    import torch

    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


class _StepLoop:
    """Pull batches (starting a new epoch when one runs out), copy them, step the model."""

    def __init__(
        self,
        loader: Any,
        device: Any,
        non_blocking: bool,
        step_fn: Callable[[Any, Any], None],
        sync: Callable[[], None],
        split: Callable[[Any], tuple[Any, Any]],
    ) -> None:
        self.loader = loader
        self.device = device
        self.non_blocking = non_blocking
        self.step_fn = step_fn
        self.sync = sync
        self.split = split
        self.epochs = 0
        self._it: Any = None
        self._pending: Any = None

    def _next(self) -> Any:
        if self._it is None:
            self._it = iter(self.loader)
            self.epochs += 1
        try:
            return next(self._it)
        except StopIteration:
            self._it = iter(self.loader)
            self.epochs += 1
            return next(self._it)

    def first_batch(self) -> float:
        """Seconds from creating the iterator to the first batch; the batch is then trained on."""
        start = time.perf_counter()
        self._pending = self._next()
        elapsed = time.perf_counter() - start
        self.step(StepTimer())
        return elapsed

    def step(self, timer: StepTimer) -> StepRecord:
        timer.start()
        if self._pending is not None:
            batch, self._pending = self._pending, None
        else:
            batch = self._next()
        timer.batch_ready()
        inputs, targets = self.split(batch)
        inputs = inputs.to(self.device, non_blocking=self.non_blocking)
        if targets is not None and hasattr(targets, "to"):
            targets = targets.to(self.device, non_blocking=self.non_blocking)
        self.sync()
        timer.copied()
        self.step_fn(inputs, targets)
        self.sync()
        return timer.stepped(len(inputs))

    def close(self) -> None:
        """Shut the workers down now rather than at garbage collection."""
        shutdown = getattr(self._it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        self._it = None
