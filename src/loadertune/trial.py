"""``run_trial``: measure one DataLoader configuration end to end.

A plain function: no Hydra, Optuna or MLflow in here, so tests and the sweep call it directly.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loadertune import datasets, ranks
from loadertune.checks import validate
from loadertune.config import RunConfig, TrialConfig
from loadertune.guards import trial_guards
from loadertune.loader import (
    StepLoop,
    Workload,
    build_loader,
    build_workload,
    stop_rule,
    synchronizer,
)
from loadertune.machine import (
    Interference,
    InterferenceMeter,
    SamplerReport,
    TreeSampler,
    machine_info,
    peak_memory_bytes,
)
from loadertune.measure import (
    GpuMonitor,
    HostCopyTimer,
    StepCallback,
    StepTimer,
    StopRule,
    copy_figures,
    copy_timer,
    rate_ci,
    summarize,
    warmup_steps,
)
from loadertune.models import samples_in
from loadertune.record import TrialResult
from loadertune.storage import open_storage

if TYPE_CHECKING:
    from loadertune.storage import StorageSession


def run_trial(config: RunConfig, on_step: StepCallback | None = None) -> TrialResult:
    """Build the dataset and loader, warm up, then time steps until the rate is known.

    The first batch (worker start-up) is always outside the timed window and is reported as
    ``first_batch_s``; ``trial.warmup_steps`` further steps (at least the loader's look-ahead,
    see :func:`warmup_steps`) follow before timing starts. Timing runs ``trial.steps`` steps
    at least and ``trial.max_steps`` at most: in between, until the time per sample is known
    within ``trial.precision`` (:mod:`loadertune.measure._precision`), or ``trial.time_limit_s``
    stops it. The CPU that other processes used meanwhile is measured beside it
    (:mod:`loadertune.machine._interference`). Indices come from back-to-back passes over the
    dataset (:func:`stream_sampler`), so the window never meets an epoch's end. The dataset lives on
    ``config.storage`` for the trial: prepared before it (a RAM copy, a simulated device) and
    cleaned up after, however the trial ends. Guards stop the trial when a worker prints a
    fatal error PyTorch does not raise (a lost batch) and, outside a sweep, before its process
    tree passes ``trial.memory_budget_mb`` (:mod:`.trial_stop`). With ``trial.nproc_per_node``
    above 1 the trial is a node of ranks (:mod:`loadertune.ranks`).

    Raises:
        ConfigError: for settings that cannot work, before any worker starts.
        TrialFailure: a guard stopped the trial; its ``reason`` says which.
    """

    validate(config)
    with trial_guards(config.trial), open_storage(config.storage) as store:
        return _run_on_storage(config, store, on_step)


@dataclass
class _Window:
    """The timed window: its steps, its bounds, and the CPU the tree and others used in it."""

    timer: StepTimer
    start: float
    end: float
    cpu_s: float  # the trial's tree, the sampler left out
    interference: Interference
    truncated: bool
    accelerator: dict[str, float]
    cpu_wait_procs: float | None = None  # workers queued for a CPU (loadertune.machine._run_queue)


@dataclass
class _Measured:
    """Everything the loop measured, from creating the iterator to the window's end."""

    window: _Window
    resources: SamplerReport
    first_batch_s: float
    measure_start: float
    warmup: int
    epochs: int
    streaming: dict[str, float]  # an iterable's idle workers and passes opened in the window
    idle_workers: list[int]


def _run_on_storage(
    config: RunConfig, store: StorageSession, on_step: StepCallback | None
) -> TrialResult:
    if config.trial.nproc_per_node > 1:
        return ranks.run_ranks(config, store, on_step)
    workload = build_workload(config, store)
    device = workload.device
    copies = copy_timer(device, synchronizer(device))
    gpu = GpuMonitor(device, config.trial.sample_hz) if device.type == "cuda" else None
    store.before_loading()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        measured = _measure(config.trial, workload, store, copies, gpu, on_step)
    seen = {str(w.message) for w in caught} | set(gpu.warnings if gpu else []) | set(workload.notes)
    copied = copy_figures(copies) if device.type == "cuda" else {}
    return _trial_result(workload, measured, store, sorted(seen), copied)


def _measure(
    tc: TrialConfig,
    workload: Workload,
    store: StorageSession,
    copies: HostCopyTimer,
    gpu: GpuMonitor | None,
    on_step: StepCallback | None,
) -> _Measured:
    """The first batch, the warm-up, then the timed window, with the process tree sampled
    from a process of its own (:mod:`loadertune.machine._tree_sampler`)."""
    eff = workload.effective
    warmup = warmup_steps(tc.warmup_steps, eff.num_workers, eff.prefetch_factor)
    rule = stop_rule(tc, eff.num_workers)
    loader = build_loader(tc, workload, warmup, rule.max_steps)
    with TreeSampler(tc.sample_hz) as sampler:
        loop = StepLoop(
            loader, workload.device, eff.non_blocking, workload.step_fn, copies, samples_in
        )
        measure_start = time.perf_counter()
        first_batch_s = loop.first_batch()
        for _ in range(warmup):
            record = loop.step(StepTimer())
            if on_step:
                on_step(record, False)
        window = _timed_window(tc, rule, loop, store, gpu, on_step, sampler.pid)
        sampler.stop()  # its last sample sees the workers, still alive, and their memory
        loop.close()
    streaming, idle = datasets.stream_figures(loader.dataset, loop.reopened, eff.num_workers)
    del loader
    return _Measured(
        window, sampler.report, first_batch_s, measure_start, warmup, loop.epochs, streaming, idle
    )


def _timed_window(
    tc: TrialConfig,
    rule: StopRule,
    loop: StepLoop,
    store: StorageSession,
    gpu: GpuMonitor | None,
    on_step: StepCallback | None,
    sampler_pid: int | None,
) -> _Window:
    """Time steps until ``rule`` is met or ``tc.time_limit_s`` runs out; CPU over the window."""
    meter = InterferenceMeter()
    loop.copies.reset()
    store.window_started()
    if gpu is not None:
        gpu.start()
    meter.start()
    start = time.perf_counter()
    timer, truncated = _time_steps(loop, rule, start + tc.time_limit_s, on_step)
    end = time.perf_counter()
    interference = meter.stop()
    accelerator = gpu.stop() if gpu is not None else {}
    store.window_ended(end - start)
    cpu_s = meter.tree_cpu_s - meter.cpu_s_by_pid.get(sampler_pid or -1, 0.0)
    cpu_wait = meter.cpu_wait_procs(exclude=(sampler_pid or -1,))
    return _Window(timer, start, end, cpu_s, interference, truncated, accelerator, cpu_wait)


def _time_steps(
    loop: StepLoop, rule: StopRule, deadline: float, on_step: StepCallback | None
) -> tuple[StepTimer, bool]:
    """Timed steps until ``rule`` is sure of the rate; past ``deadline``, stop (truncated).

    A step that met the end of an iterable's pass (the loop opened the next) is taken out of
    the window with its time and counted (:meth:`StepLoop.discard`): the workers' start-up
    is an epoch boundary, not a stall."""
    timer = StepTimer()
    check_at = rule.min_steps
    while True:
        epochs = loop.epochs
        record = loop.step(timer)
        if loop.epochs != epochs:  # an iterable's pass ended: the next was opened, untimed
            loop.discard(timer)
            if on_step:
                on_step(record, False)
        elif on_step:
            on_step(record, True)
        steps = len(timer.records)
        if steps >= check_at and loop.epochs == epochs:
            if rule.sure(timer.records):
                return timer, False
            check_at = rule.next_check(steps)
        if time.perf_counter() > deadline:
            return timer, True


def _trial_result(
    workload: Workload,
    measured: _Measured,
    store: StorageSession,
    seen: list[str],
    copied: dict[str, float],
) -> TrialResult:
    """Summarise the window and gather what the trial saw into one :class:`TrialResult`."""

    window, resources = measured.window, measured.resources
    workers = workload.effective.num_workers
    records = window.timer.records
    ci = rate_ci(records, workers)
    return TrialResult(
        summary=summarize(records, workers),
        steps=records,
        resources=resources.samples,
        first_batch_s=measured.first_batch_s,
        peak_memory_mb=peak_memory_bytes(resources.samples) / 2**20,
        cpu_percent_mean=100.0 * window.cpu_s / max(window.interference.window_s, 1e-9),
        memory_metric=resources.memory_metric,
        effective_loader=workload.effective,
        device=str(workload.device),
        start_method=workload.start_method,
        epochs=measured.epochs,
        truncated=window.truncated,
        machine=machine_info(),
        warnings=seen,
        window_start=window.start,
        warmup_steps=measured.warmup,
        measure_s=window.end - measured.measure_start,
        storage=dict(store.figures),
        accelerator=window.accelerator | copied,
        other_cpu_percent=window.interference.other_cpu_percent,
        steal_percent=window.interference.steal_percent,
        cpu_wait_procs=window.cpu_wait_procs,
        rate_ci_pct=None if ci is None else 100.0 * ci,
        streaming=measured.streaming,
        idle_workers=measured.idle_workers if workers else [],
        batch_bytes=workload.batch.bytes if workload.batch else 0,
        batch_tensors=workload.batch.tensors if workload.batch else 0,
    )
