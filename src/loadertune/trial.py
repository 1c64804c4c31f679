"""``run_trial``: measure one DataLoader configuration end to end.

A plain function: no Hydra, Optuna or MLflow in here, so tests and the sweep call it directly.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from loadertune.accelerator import GpuMonitor, HostCopyTimer, copy_figures, copy_timer
from loadertune.config import RunConfig
from loadertune.errors import ConfigError
from loadertune.monitor import ProcessTreeMonitor
from loadertune.result import TrialResult
from loadertune.timing import StepRecord, StepTimer, summarize
from loadertune.validation import validate

if TYPE_CHECKING:
    from loadertune.storage import StorageSession

StepCallback = Callable[[StepRecord, bool], None]
"""Called after every step with the record and whether it was inside the timed window."""


def resolve_device(name: str) -> str:
    """``auto`` picks CUDA when present, else the CPU; asking for absent CUDA is refused.

    Raises:
        ConfigError: ``trial.device`` names CUDA on a machine without it.
    """
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            "trial.device",
            name,
            "asks for CUDA but torch sees no CUDA device here",
            "use trial.device=auto or cpu on this machine",
        )
    return name


def look_ahead(num_workers: int, prefetch_factor: int | None) -> int:
    """Batches a DataLoader keeps in flight: ``num_workers x prefetch_factor`` (default 2)."""
    return num_workers * (prefetch_factor or 2) if num_workers else 0


def warmup_steps(asked: int, num_workers: int, prefetch_factor: int | None = None) -> int:
    """Untimed steps after the first batch: ``asked``, but at least the loader's look-ahead.

    With workers, a DataLoader keeps :func:`look_ahead` batches in flight. Timing must start
    once that pipeline is in its steady state: the workers' first batches arrive together (a
    burst that took one worker's load time), and while the queue fills the workers load at
    full speed. Timing from inside either phase counts batches loaded before the window
    began, or slows the step with loading it will not pay for later; both bias the figure by
    setting (a 20% overstatement for 16 workers on a slow device, over a 40-step window). So
    the look-ahead is consumed first, whatever ``trial.warmup_steps`` says.
    """
    return max(asked, look_ahead(num_workers, prefetch_factor))


def stream_sampler(size: int, length: int, shuffle: bool, generator: Any) -> Any:
    """Sample indices for a trial: ``length`` of them from passes over the dataset, as one epoch.

    A DataLoader's workers stop loading when its epoch has no batches left to hand out, so
    near an epoch's end the step no longer shares the CPUs with loading, and a timed window
    there (or a small dataset's whole epoch, loaded ahead during warm-up) flatters settings
    with a deep look-ahead. Back-to-back passes (each shuffled anew when ``shuffle``:
    PyTorch's ``RandomSampler`` with ``num_samples`` beyond the dataset) keep every timed
    step in the steady state. Worker start-up, which a real epoch pays again unless
    ``persistent_workers``, is ``first_batch_s``.
    """
    if shuffle:
        from torch.utils.data import RandomSampler

        return RandomSampler(range(size), num_samples=length, generator=generator)
    return _InOrder(size, length)


class _InOrder:
    """``length`` indices of unshuffled passes over a dataset of ``size``: 0, 1, ... 0, 1 ..."""

    def __init__(self, size: int, length: int) -> None:
        self.size, self.length = size, length

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[int]:
        return (i % self.size for i in range(self.length))


def run_trial(config: RunConfig, on_step: StepCallback | None = None) -> TrialResult:
    """Build the dataset and loader, warm up, then time ``config.trial.steps`` steps.

    The first batch (worker start-up) is always outside the timed window and is reported as
    ``first_batch_s``; ``trial.warmup_steps`` further steps (at least the loader's look-ahead,
    see :func:`warmup_steps`) follow before timing starts. Indices come from back-to-back
    passes over the dataset (:func:`stream_sampler`), so the window never meets an epoch's end.
    The dataset lives on ``config.storage`` for the trial: prepared before it (a RAM copy,
    a simulated device) and cleaned up after, however the trial ends.

    Raises:
        ConfigError: for settings that cannot work, before any worker starts.
    """
    from loadertune.storage import open_storage

    validate(config)
    with open_storage(config.storage) as store:
        return _run_on_storage(config, store, on_step)


def _run_on_storage(
    config: RunConfig, store: StorageSession, on_step: StepCallback | None
) -> TrialResult:
    import torch
    import torch.multiprocessing as mp

    from loadertune import preflight
    from loadertune.datasets import build_dataset
    from loadertune.loader import build_dataloader, effective_settings
    from loadertune.machine import machine_info
    from loadertune.models import build_train_step, split_batch

    tc = config.trial
    torch.manual_seed(tc.seed)
    if tc.torch_threads is not None:
        torch.set_num_threads(tc.torch_threads)
    device = torch.device(resolve_device(tc.device))
    dataset = build_dataset(config, store)
    num_classes = int(getattr(dataset, "num_classes", 0) or 10)
    vocab_size = getattr(dataset, "vocab_size", None)
    sample = dataset[0]
    step_fn = build_train_step(
        config.model, sample, num_classes, device, config.dataset.name, vocab_size
    )
    effective = effective_settings(config.loader, device)
    preflight.check(effective, sample)
    start_method = effective.multiprocessing_context or mp.get_start_method(allow_none=True)
    start_method = start_method or mp.get_all_start_methods()[0]
    if effective.num_workers == 0:
        start_method = "none"
    sync = _synchronizer(device)
    copies = copy_timer(device, sync)
    gpu = GpuMonitor(device, tc.sample_hz) if device.type == "cuda" else None
    store.before_loading()

    warmup = warmup_steps(tc.warmup_steps, effective.num_workers, effective.prefetch_factor)
    ahead = look_ahead(effective.num_workers, effective.prefetch_factor)
    batches = 1 + warmup + tc.steps + ahead + 1  # never runs dry inside the window
    stream = stream_sampler(
        len(dataset),
        batches * (effective.batch_size or 1),
        effective.shuffle,
        torch.Generator().manual_seed(tc.seed),
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = build_dataloader(
            dataset,
            effective,
            device,
            sampler=stream,
            generator=torch.Generator().manual_seed(tc.seed),
        )
        with ProcessTreeMonitor(hz=tc.sample_hz) as monitor:
            loop = _StepLoop(loader, device, effective.non_blocking, step_fn, copies, split_batch)
            measure_start = time.perf_counter()
            first_batch_s = loop.first_batch()
            for _ in range(warmup):
                record = loop.step(StepTimer())
                if on_step:
                    on_step(record, False)
            timer = StepTimer()
            monitor.sample()
            cpu_start = monitor.cpu_seconds
            copies.reset()
            store.window_started()
            if gpu is not None:
                gpu.start()
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
            accelerator = gpu.stop() if gpu is not None else {}
            store.window_ended(window_end - window_start)
            monitor.sample()
            cpu_window = monitor.cpu_seconds - cpu_start
            loop.close()
        del loader
    cpu_mean = 100.0 * cpu_window / (window_end - window_start)
    peak = max((s.memory_bytes for s in monitor.samples), default=0)
    return TrialResult(
        summary=summarize(timer.records, effective.num_workers),
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
        warnings=sorted({str(w.message) for w in caught} | set(gpu.warnings if gpu else [])),
        window_start=window_start,
        warmup_steps=warmup,
        measure_s=window_end - measure_start,
        storage=dict(store.figures),
        accelerator=accelerator | (copy_figures(copies) if device.type == "cuda" else {}),
    )


def _synchronizer(device: Any) -> Callable[[], None]:
    """Wait for queued device work, so timed regions end when the work does."""
    import torch

    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


class _StepLoop:
    """Pull batches (starting a new epoch when one runs out), copy them, step the model.

    Each step ends synchronised with the device; ``copies`` times the host-to-device copy
    (with CUDA events on a GPU, so the copy is not forced to finish before the step starts).
    """

    def __init__(
        self,
        loader: Any,
        device: Any,
        non_blocking: bool,
        step_fn: Callable[[Any, Any], None],
        copies: HostCopyTimer,
        split: Callable[[Any], tuple[Any, Any]],
    ) -> None:
        self.loader = loader
        self.device = device
        self.non_blocking = non_blocking
        self.step_fn = step_fn
        self.copies = copies
        self.sync = copies.sync
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
        self.copies.start()
        inputs = inputs.to(self.device, non_blocking=self.non_blocking)
        if targets is not None and hasattr(targets, "to"):
            targets = targets.to(self.device, non_blocking=self.non_blocking)
        self.copies.stop(inputs, targets)
        timer.copied()
        self.step_fn(inputs, targets)
        self.sync()
        return self.copies.finish(timer, timer.stepped(len(inputs)))

    def close(self) -> None:
        """Shut the workers down now rather than at garbage collection."""
        shutdown = getattr(self._it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        self._it = None
