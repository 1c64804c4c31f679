"""What a person sees in the terminal: a progress bar while steps run, then one summary table."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from loadertune.config import RunConfig, prefetch_factor_of
from loadertune.measure import diagnose_result

if TYPE_CHECKING:
    from loadertune.measure import StepCallback, StepRecord
    from loadertune.record._result import TrialResult

WIDE = 160  # columns when the output is not a terminal and COLUMNS is not set


def wide_console(stderr: bool = False) -> Console:
    """A rich console: a terminal's own width, else ``COLUMNS`` or 160 columns, so output
    piped to a file or a CI log is not wrapped at rich's default of 80."""
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    columns = os.environ.get("COLUMNS", "")
    return Console(stderr=stderr, width=int(columns) if columns.isdigit() else WIDE)


console = wide_console(stderr=True)


@contextmanager
def step_progress(config: RunConfig) -> Iterator[StepCallback]:
    """A progress bar over warm-up and timed steps; yields the ``on_step`` callback.

    Timing runs ``trial.steps`` steps at least and more until the rate is known within
    ``trial.precision``, so past the minimum the bar grows with the steps. Shown on a
    terminal only: piped or redirected, a bar would leave an empty line in the log.
    """
    if not console.is_terminal:
        yield lambda record, timed: None
        return
    total = config.trial.warmup_steps + config.trial.steps
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("warm-up", total=total)
        done = 0

        def on_step(record: StepRecord, timed: bool) -> None:
            nonlocal done, total
            done += 1
            if done > total:
                total = done
            progress.update(
                task,
                completed=done,
                total=total,
                description="timed steps" if timed else "warm-up",
            )

        yield on_step


def loader_line(result: TrialResult) -> str:
    """The effective loader settings in one line."""
    lc = result.effective_loader
    parts = [f"batch_size={lc.batch_size}", f"num_workers={lc.num_workers}"]
    if lc.num_workers:
        parts += [
            f"prefetch_factor={prefetch_factor_of(lc.num_workers, lc.prefetch_factor)}",
            f"persistent_workers={lc.persistent_workers}",
            f"start={result.start_method}",
        ]
    parts.append(f"pin_memory={lc.pin_memory}")
    return " ".join(parts)


def summary_table(config: RunConfig, result: TrialResult) -> Table:
    """The trial's figures, at a glance."""
    table = Table(title="loadertune trial", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    rows = summary_rows(config, result)
    rows += [(name, value) for name, value in device_rows(result) if value]
    for name, value in rows:
        table.add_row(name, value)

    diagnosis = diagnose_result(result)
    table.add_row("bottleneck", f"[bold]{diagnosis.label}[/]: {diagnosis.sentence}")
    for warning in result.warnings:
        table.add_row("[yellow]warning", warning)
    return table


def summary_rows(config: RunConfig, result: TrialResult) -> list[tuple[str, str]]:
    """(name, value) for each line of the summary, before the devices and the diagnosis."""
    s = result.summary
    return [
        (
            "workload",
            f"dataset={config.dataset.name} storage={config.storage.name} "
            f"model={config.model.name} device={result.device}",
        ),
        ("loader", loader_line(result)),
        ("time per sample", f"{s.time_per_sample_ms:.3f} ms  (objective, lower is better)"),
        ("samples/s", f"{s.samples_per_s:,.0f}"),
        ("step p50 / p90", f"{s.step_time_ms_p50:.1f} / {s.step_time_ms_p90:.1f} ms"),
        (
            "waiting for data",
            f"{s.data_wait_fraction:.0%} of the timed window "
            f"(p50 {s.data_wait_ms_p50:.1f}, p99 {s.data_wait_ms_p99:.1f}, max "
            f"{s.data_wait_ms_max:.1f} ms a step; {s.long_waits_per_1000_steps:.0f} long waits "
            "per 1000 steps)",
        ),
        ("copy / compute", f"{s.copy_ms_mean:.2f} / {s.compute_ms_mean:.1f} ms a step (mean)"),
        ("first batch", f"{result.first_batch_s:.2f} s (worker start-up, not timed)"),
        (
            "CPU",
            f"{result.cpu_percent_mean:.0f}% of one core (main + workers, mean), "
            f"{result.machine['usable_cpus']} usable CPUs",
        ),
        ("other work", other_work_line(result)),
        (
            "memory",
            f"{result.peak_memory_mb:,.0f} MB peak ({result.memory_metric.upper()}, "
            "main + workers)",
        ),
        ("timed window", window_line(config, result)),
        *streaming_rows(result),
    ]


def streaming_rows(result: TrialResult) -> list[tuple[str, str]]:
    """For an iterable dataset: the passes opened inside the window and the idle workers."""
    if not result.streaming:
        return []
    reopens = int(result.streaming.get("window_reopens", 0))
    idle = ", ".join(str(w) for w in result.idle_workers) or "none"
    return [
        (
            "stream",
            f"{reopens} pass(es) ended inside the timed window (each next pass's start-up "
            f"left out of it); workers that yielded nothing: {idle}",
        )
    ]


def other_work_line(result: TrialResult) -> str:
    """What other processes (and a hypervisor) took from the machine during the window."""
    line = (
        f"{result.other_cpu_percent:.0f}% of one core used by other processes during the "
        "timed window"
    )
    if result.steal_percent >= 0.5:
        line += f", {result.steal_percent:.0f}% stolen by the hypervisor"
    return line


def window_line(config: RunConfig, result: TrialResult) -> str:
    """Steps, samples and seconds timed, and how sure the rate is."""
    s, tc = result.summary, config.trial
    line = f"{s.steps} steps, {s.samples} samples, {s.window_s:.2f} s"
    if result.rate_ci_pct is not None:
        line += f"; rate known within ±{result.rate_ci_pct:.1f}% (95%)"
        if tc.precision is not None and result.rate_ci_pct > 100.0 * tc.precision:
            line += f", not the {tc.precision:.1%} asked (trial.precision)"
    elif tc.precision is not None:
        line += "; too few arrival cycles to say how sure the rate is"
    if result.truncated:
        line += " (stopped by trial.time_limit_s)"
    return line


def device_rows(result: TrialResult) -> list[tuple[str, str]]:
    """What the storage and the accelerator reported, where they reported anything."""
    st, gpu = result.storage, result.accelerator
    parts = []
    if "storage_read_mb_per_s" in st:
        parts.append(
            f"simulated device read {st['storage_read_mb_per_s']:.1f} MB/s, "
            f"{st['storage_busy_fraction']:.0%} of its read slots and "
            f"{st['storage_bandwidth_fraction']:.0%} of its bandwidth in use"
        )
    if "storage_copied_mb" in st:
        parts.append(f"RAM copy of {st['storage_copied_mb']:,.0f} MB")
    if "storage_evicted_mb" in st:
        parts.append(f"evicted {st['storage_evicted_mb']:,.0f} MB from the page cache")
    if "storage_cached_fraction" in st:
        parts.append(f"{st['storage_cached_fraction']:.0%} in the page cache at the start")
    gpu_parts = []
    if "gpu_memory_peak_mb" in gpu:
        gpu_parts.append(f"peak {gpu['gpu_memory_peak_mb']:,.0f} MB allocated")
    if "gpu_utilization_percent" in gpu:
        gpu_parts.append(f"{gpu['gpu_utilization_percent']:.0f}% busy (NVML)")
    if "h2d_mb_per_s" in gpu:
        gpu_parts.append(f"host-to-device {gpu['h2d_mb_per_s']:,.0f} MB/s")
    return [("storage", "; ".join(parts)), ("GPU", "; ".join(gpu_parts))]


def print_summary(config: RunConfig, result: TrialResult) -> None:
    """Print the summary table to the terminal (stdout)."""
    wide_console().print(summary_table(config, result))
