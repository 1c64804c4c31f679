"""The node's figures from its ranks' reports: the trial's result with several ranks.

The ranks run in lock-step (DDP's all-reduce, or one after a user's step) and open their
timed windows together (a barrier after warm-up), so the node delivers all ranks' samples
in the slowest rank's window: node samples/s = all samples / the slowest rank's window, and
the time per sample the sweep optimises is its inverse. The node's other step figures are
the slowest rank's; each rank's own are kept in ``TrialResult.ranks``. The process-tree
figures (CPU, memory, other work) are rank 0's view of the whole trial: the trial process,
every rank and every rank's workers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from loadertune.config import LoaderConfig
from loadertune.machine import Interference, ResourceSample, peak_memory_bytes
from loadertune.measure import StepRecord, TimingSummary, pace_setter, rate_ci, summarize
from loadertune.record import RankFigures, TrialResult


@dataclass
class RankReport:
    """What one rank measured, returned through the launcher to the trial process."""

    rank: int
    records: list[StepRecord]
    first_batch_s: float
    warmup: int
    epochs: int
    measure_start: float
    window_start: float
    window_end: float
    truncated: bool
    torch_threads: int
    effective: LoaderConfig
    device: str
    start_method: str
    warnings: list[str] = field(default_factory=list)
    accelerator: dict[str, float] = field(default_factory=dict)
    # Rank 0 only: the node's steps (its timing, all ranks' samples) and the whole tree.
    node_records: list[StepRecord] = field(default_factory=list)
    resources: list[ResourceSample] = field(default_factory=list)
    memory_metric: str = "pss"
    cpu_s: float = 0.0
    interference: Interference | None = None
    storage: dict[str, float] = field(default_factory=dict)
    streaming: dict[str, float] = field(default_factory=dict)  # an iterable's, per rank
    idle_workers: list[int] = field(default_factory=list)


def node_streaming(reports: list[RankReport]) -> tuple[dict[str, float], list[int]]:
    """An iterable's figures for the node: the passes opened in the window (the same on
    every rank, which discard together), the workers that yielded nothing summed over the
    ranks, and the ids of those idle on any rank."""
    if not any(r.streaming for r in reports):
        return {}, []
    reopens = max(r.streaming.get("window_reopens", 0.0) for r in reports)
    idle = sum(r.streaming.get("idle_workers", 0.0) for r in reports)
    ids = sorted({w for r in reports for w in r.idle_workers})
    return {"window_reopens": reopens, "idle_workers": idle}, ids


def rank_figures(report: RankReport) -> tuple[RankFigures, TimingSummary]:
    """One rank's own figures, and its summary."""
    s = summarize(report.records, report.effective.num_workers)
    figures = RankFigures(
        rank=report.rank,
        time_per_sample_ms=s.time_per_sample_ms,
        data_wait_fraction=s.data_wait_fraction,
        copy_ms_mean=s.copy_ms_mean,
        compute_ms_mean=s.compute_ms_mean,
        window_s=s.window_s,
        samples=s.samples,
        first_batch_s=report.first_batch_s,
        torch_threads=report.torch_threads,
    )
    return figures, s


def node_summary(summaries: list[TimingSummary]) -> TimingSummary:
    """All ranks' samples over the slowest rank's window; the slowest rank's other figures."""
    slowest = pace_setter(summaries, lambda s: s.window_s)
    samples = sum(s.samples for s in summaries)
    window = slowest.window_s
    return dataclasses.replace(
        slowest,
        samples=samples,
        time_per_sample_ms=window * 1000.0 / samples,
        samples_per_s=samples / window if window > 0 else float("inf"),
        cycle_window_s=window,
        cycle_samples=samples,
    )


def node_result(reports: list[RankReport], machine: dict[str, object]) -> TrialResult:
    """The trial's result from every rank's report (in any order)."""

    reports = sorted(reports, key=lambda r: r.rank)
    first = reports[0]
    pairs = [rank_figures(r) for r in reports]
    summary = node_summary([s for _, s in pairs])
    slowest = pace_setter(range(len(pairs)), lambda k: pairs[k][1].window_s)
    window = max(r.window_end for r in reports) - min(r.window_start for r in reports)
    interference = first.interference or Interference(0.0, 0.0, window)
    workers = first.effective.num_workers
    ci = rate_ci(first.node_records, workers) if first.node_records else None
    streaming, idle = node_streaming(reports)
    return TrialResult(
        streaming=streaming,
        idle_workers=idle,
        summary=summary,
        steps=first.node_records,
        resources=first.resources,
        first_batch_s=max(r.first_batch_s for r in reports),
        peak_memory_mb=peak_memory_bytes(first.resources) / 2**20,
        cpu_percent_mean=100.0 * first.cpu_s / max(interference.window_s, 1e-9),
        memory_metric=first.memory_metric,
        effective_loader=first.effective,
        device=first.device,
        start_method=first.start_method,
        epochs=max(r.epochs for r in reports),
        truncated=any(r.truncated for r in reports),
        machine=dict(machine) | {"rank_torch_threads": first.torch_threads},
        warnings=sorted({w for r in reports for w in r.warnings}),
        window_start=first.window_start,
        warmup_steps=first.warmup,
        measure_s=max(r.window_end for r in reports) - first.measure_start,
        storage=dict(first.storage),
        accelerator=dict(reports[slowest].accelerator),
        other_cpu_percent=interference.other_cpu_percent,
        steal_percent=interference.steal_percent,
        rate_ci_pct=None if ci is None else 100.0 * ci,
        ranks=[f for f, _ in pairs],
    )
