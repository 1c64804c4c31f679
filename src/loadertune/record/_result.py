"""What one trial measured: typed, plain data, independent of how it is recorded."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from loadertune.config import LoaderConfig
from loadertune.machine import ResourceSample
from loadertune.measure import StepRecord, TimingSummary

OBJECTIVE = "time_per_sample_ms"


@dataclass(frozen=True)
class RankFigures:
    """One rank's own figures in a trial of several ranks (``trial.nproc_per_node`` > 1).

    The trial's summary is the node's; these say how each rank fared inside it, so the
    slowest can be named with what held it back (waiting for data, copying, stepping).
    """

    rank: int
    time_per_sample_ms: float  # this rank's own samples over its own window
    data_wait_fraction: float
    copy_ms_mean: float
    compute_ms_mean: float
    window_s: float
    samples: int
    first_batch_s: float
    torch_threads: int  # intra-op threads in the rank (torchrun's OMP_NUM_THREADS=1 default)

    def metrics(self) -> dict[str, float]:
        """``rank<k>.time_per_sample_ms`` and ``rank<k>.data_wait_fraction``, beside the node's."""
        return {
            f"rank{self.rank}.time_per_sample_ms": self.time_per_sample_ms,
            f"rank{self.rank}.data_wait_fraction": self.data_wait_fraction,
        }


@dataclass
class TrialResult:
    """One DataLoader configuration measured end to end.

    Attributes:
        summary: the timed window's figures (the objective is ``time_per_sample_ms``).
        steps: every timed step, in order (warm-up steps excluded).
        resources: process-tree samples over the whole trial (CPU in every one, memory in
            some: :mod:`loadertune.machine._tree_sampler`).
        first_batch_s: from creating the iterator to the first batch (worker start-up).
        effective_loader: the settings that took effect (``pin_memory`` is off without an
            accelerator, whatever was asked).
        device: where batches went. start_method: how workers were started.
        epochs: iterators created (more than one when the window spans epochs).
        truncated: the time limit stopped the timed window early.
        warnings: warnings PyTorch raised while the loader ran (e.g. too many workers).
        machine: host, CPUs, memory, torch, GPU.
        warmup_steps: untimed steps run after the first batch (``trial.warmup_steps``, raised
            to ``num_workers - 1`` so the workers' start-up burst is not timed).
        measure_s: from creating the iterator to the end of the timed window (first batch,
            warm-up and timed steps): the part of a trial that is measurement, not set-up.
        storage: figures the storage reported, e.g. ``storage_cached_fraction`` (share of
            the dataset in the page cache when loading began) or, on a throttled device,
            ``storage_read_mb_per_s``, ``storage_busy_fraction`` (share of its read slots
            in use) and ``storage_bandwidth_fraction`` over the timed window.
        accelerator: on CUDA, ``gpu_memory_peak_mb``, ``gpu_utilization_percent`` and
            ``h2d_mb_per_s`` (host-to-device copy speed; ``copy_ms_mean`` is its time).
        other_cpu_percent: CPU that processes outside the trial's tree used over the timed
            window, in % of one core (on the CPUs the trial may use): other work on a
            shared machine, which the figure also measures.
        steal_percent: CPU a hypervisor gave to other guests over the window, % of one core.
        cpu_wait_procs: how many of the loader's processes (its workers; without workers, the
            trial's process) were on average ready to run but queued for a CPU over the
            window (the kernel's run-queue wait, :mod:`loadertune.machine._run_queue`); None where
            the kernel does not say.
        rate_ci_pct: half-width of the ~95% interval of the time per sample, in % of it
            (:mod:`loadertune.measure._precision`); None when the window held fewer than 5 blocks.
        ranks: with ``trial.nproc_per_node`` > 1, each rank's own figures; the summary is then
            the node's (all ranks' samples over the slowest rank's window) and ``steps`` the
            node's steps (rank 0's timing, every rank's samples). Empty for one process.
        streaming: for an iterable dataset, ``idle_workers`` (workers that yielded no item
            in the whole trial: more workers than shards) and ``window_reopens`` (passes that
            ended inside the timed window; each next pass's start-up is left out of it).
        idle_workers: the ids of those workers.
        batch_bytes, batch_tensors: a batch's bytes and tensors, as the pre-flight checks
            read them (:class:`loadertune.checks._preflight.Batch`; 0 where not read): what each
            batch a worker keeps in flight holds, which bounds the workers a range may reach.
    """

    summary: TimingSummary
    steps: list[StepRecord]
    resources: list[ResourceSample]
    first_batch_s: float
    peak_memory_mb: float
    cpu_percent_mean: float
    memory_metric: str
    effective_loader: LoaderConfig
    device: str
    start_method: str
    epochs: int
    truncated: bool
    machine: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    window_start: float = 0.0
    warmup_steps: int = 0
    measure_s: float = 0.0
    storage: dict[str, float] = field(default_factory=dict)
    accelerator: dict[str, float] = field(default_factory=dict)
    other_cpu_percent: float = 0.0
    steal_percent: float = 0.0
    cpu_wait_procs: float | None = None
    rate_ci_pct: float | None = None
    ranks: list[RankFigures] = field(default_factory=list)
    streaming: dict[str, float] = field(default_factory=dict)
    idle_workers: list[int] = field(default_factory=list)
    batch_bytes: int = 0
    batch_tensors: int = 0

    @property
    def objective(self) -> float:
        """Time per sample in milliseconds: lower is better."""
        return self.summary.time_per_sample_ms

    def metrics(self) -> dict[str, float]:
        """The summary metrics under their documented names."""
        return {
            **summary_metrics(self.summary),
            "first_batch_s": self.first_batch_s,
            "peak_memory_mb": self.peak_memory_mb,
            "cpu_percent_mean": self.cpu_percent_mean,
            "warmup_steps": float(self.warmup_steps),
            "other_cpu_percent": self.other_cpu_percent,
            "steal_percent": self.steal_percent,
            **({} if self.rate_ci_pct is None else {"rate_ci_pct": self.rate_ci_pct}),
            **({} if self.cpu_wait_procs is None else {"cpu_wait_procs": self.cpu_wait_procs}),
            **self.storage,
            **self.accelerator,
            **self.streaming,
            **{k: v for rank in self.ranks for k, v in rank.metrics().items()},
        }

    def to_dict(self) -> dict[str, Any]:
        """Everything as JSON-ready data."""
        data = asdict(self)
        if not self.ranks:  # one process: the record as it always was
            del data["ranks"]
        data["metrics"] = self.metrics()
        return data


def summary_metrics(s: TimingSummary) -> dict[str, float]:
    """A timed window's figures under their documented metric names: a complete trial's
    (:meth:`TrialResult.metrics`) and the steps a stopped one managed alike."""
    return {
        "time_per_sample_ms": s.time_per_sample_ms,
        "samples_per_s": s.samples_per_s,
        "step_time_ms_p50": s.step_time_ms_p50,
        "step_time_ms_p90": s.step_time_ms_p90,
        "step_time_ms_p99": s.step_time_ms_p99,
        "data_wait_ms_p50": s.data_wait_ms_p50,
        "data_wait_ms_p90": s.data_wait_ms_p90,
        "data_wait_ms_p99": s.data_wait_ms_p99,
        "data_wait_ms_max": s.data_wait_ms_max,
        "long_waits_per_1000_steps": s.long_waits_per_1000_steps,
        "data_wait_fraction": s.data_wait_fraction,
        "copy_ms_mean": s.copy_ms_mean,
        "compute_ms_mean": s.compute_ms_mean,
        "timed_steps": float(s.steps),
        "timed_samples": float(s.samples),
        "window_s": s.window_s,
        "cycle_window_s": s.cycle_window_s,
        "cycle_samples": float(s.cycle_samples),
        "wait_cpu_cores": s.wait_cpu_cores,
        "step_cpu_cores": s.step_cpu_cores,
    }
