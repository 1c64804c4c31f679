"""What limits a trial's pipeline, labelled from what the trial measured, with the evidence.

A label answers "why is this setting as fast as it is, and what would help":

- ``compute-bound``: the step waited for data less than ``WAIT_LOW`` of the time; the model
  step is the limit, and more workers cannot help.
- ``busy machine``: the step waited for data while processes outside the trial (and a
  hypervisor's steal) kept ``OTHER_BUSY`` of the usable CPUs' capacity or more busy: the
  waits are partly theirs, so neither loading nor storage can be blamed; measure again on a
  quieter machine, or compare settings measured side by side.
- ``loading in the training process``: ``num_workers=0`` and the step waits; workers would
  overlap loading with the step.
- ``cpu-bound loading``: waiting for data while the process tree keeps the usable CPUs busy;
  more workers cannot help, cheaper decoding, caching or uint8 batches can.
- ``storage-bound``: waiting for data while the storage reports itself saturated (a
  throttled device's read slots or bandwidth in use ``STORAGE_BUSY`` of the window or more):
  more workers only queue; faster storage, caching or a RAM copy help.
- ``cpu-contended``: waiting for data while ``CPU_WAITING`` of the loader's processes or more
  were, on average, ready to run but queued for a CPU (the kernel's run-queue wait,
  :mod:`loadertune.machine._run_queue`): the CPUs are contended, by other work or by more processes
  than CPUs; fewer workers or a quieter machine help, faster storage does not.
- ``io-bound``: waiting for data while the CPUs are not busy and the processes are not
  waiting for one (and, where the storage says, it has room): workers wait on reads; more
  workers overlap more of them, and faster storage, caching or a RAM copy help.
- ``copy-bound``: the host-to-device copy takes more than ``COPY_HIGH`` of the step; pinned
  memory, non-blocking copies or smaller (uint8) batches help.
- ``memory-limited``: the tree's peak memory came within ``MEMORY_HIGH`` of the budget.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loadertune.machine import other_share
from loadertune.measure._timing import pace_setter

WAIT_LOW = 0.10  # share of the timed window spent waiting below which loading keeps up
CPU_BUSY = 0.85  # share of the usable CPUs above which loading is CPU-bound
COPY_HIGH = 0.20  # share of a step spent copying above which the copy is the limit
MEMORY_HIGH = 0.80  # share of the memory budget above which memory limits the setting
STORAGE_BUSY = 0.90  # share of the window a device's slots or channel were busy: saturated
OTHER_BUSY = 0.25  # share of the usable CPUs' capacity other work took: a busy machine
CPU_WAITING = 0.5  # the loader's processes queued for a CPU on average: contended CPUs

MEMORY_LIMITED = "memory-limited"
COPY_BOUND = "copy-bound"
COMPUTE_BOUND = "compute-bound"
BUSY_MACHINE = "busy machine"
LOADING_IN_PROCESS = "loading in the training process"
STORAGE_BOUND = "storage-bound"
CPU_BOUND_LOADING = "cpu-bound loading"
CPU_CONTENDED = "cpu-contended"
IO_BOUND = "io-bound"
LABELS = (
    MEMORY_LIMITED,
    COPY_BOUND,
    COMPUTE_BOUND,
    BUSY_MACHINE,
    LOADING_IN_PROCESS,
    STORAGE_BOUND,
    CPU_BOUND_LOADING,
    CPU_CONTENDED,
    IO_BOUND,
)
"""Every label :func:`diagnose` gives, in the order its rules are tried."""


@dataclass(frozen=True)
class Diagnosis:
    """A label, one sentence a person can act on, and the figures behind it."""

    label: str
    sentence: str
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Figures:
    """The figures the rules read, with the shares they compare against thresholds."""

    num_workers: int
    data_wait_fraction: float
    cpu_share: float
    usable_cpus: int
    copy_share: float
    peak_memory_mb: float
    memory_budget_mb: float | None
    slots: float | None  # a throttled device's read slots in use, share of the window
    channel: float | None  # its bandwidth in use, share of the window
    other_cpu_percent: float = 0.0  # other processes over the window, % of one core
    steal_percent: float = 0.0  # the hypervisor's steal over the window, % of one core
    cpu_wait_procs: float | None = None  # the loader's processes queued for a CPU, on average

    @property
    def other_share(self) -> float:
        """Other work and steal, as a share of the usable CPUs' capacity."""
        return other_share(self.other_cpu_percent, self.steal_percent, self.usable_cpus)


def diagnose(
    *,
    num_workers: int,
    data_wait_fraction: float,
    cpu_percent_mean: float,
    usable_cpus: int,
    copy_ms_mean: float,
    step_time_ms_p50: float,
    peak_memory_mb: float,
    memory_budget_mb: float | None = None,
    storage: Mapping[str, float] | None = None,
    other_cpu_percent: float = 0.0,
    steal_percent: float = 0.0,
    cpu_wait_procs: float | None = None,
) -> Diagnosis:
    """Label one trial from its summary figures (see the module docstring for the rules).

    ``storage`` holds what the storage measured over the window (``TrialResult.storage``);
    a throttled device's ``storage_busy_fraction`` and ``storage_bandwidth_fraction`` tell a
    saturated device from one with room for more reads in flight. ``other_cpu_percent`` and
    ``steal_percent`` are the CPU other processes and the hypervisor took over the window
    (:mod:`loadertune.machine._interference`), in % of one core; ``cpu_wait_procs`` how many of the
    loader's processes were queued for a CPU, on average (:mod:`loadertune.machine._run_queue`).
    """
    storage = storage or {}
    f = _Figures(
        num_workers=num_workers,
        data_wait_fraction=data_wait_fraction,
        cpu_share=cpu_percent_mean / (100.0 * max(usable_cpus, 1)),
        usable_cpus=usable_cpus,
        copy_share=copy_ms_mean / step_time_ms_p50 if step_time_ms_p50 > 0 else 0.0,
        peak_memory_mb=peak_memory_mb,
        memory_budget_mb=memory_budget_mb,
        slots=storage.get("storage_busy_fraction"),
        channel=storage.get("storage_bandwidth_fraction"),
        other_cpu_percent=other_cpu_percent,
        steal_percent=steal_percent,
        cpu_wait_procs=cpu_wait_procs,
    )
    evidence = _evidence(f, storage)
    for rule in _RULES:
        found = rule(f)
        if found is not None:
            return Diagnosis(found[0], found[1], evidence)
    return Diagnosis(*_io_bound(f), evidence)


def _evidence(f: _Figures, storage: Mapping[str, float]) -> dict[str, Any]:
    """The figures behind a label, rounded for a person to read."""
    evidence: dict[str, Any] = {
        "data_wait_fraction": round(f.data_wait_fraction, 3),
        "cpu_share_of_usable": round(f.cpu_share, 3),
        "usable_cpus": f.usable_cpus,
        "copy_share_of_step": round(f.copy_share, 3),
        "peak_memory_mb": round(f.peak_memory_mb, 1),
        "num_workers": f.num_workers,
    }
    for key in ("storage_read_mb_per_s", "storage_busy_fraction", "storage_bandwidth_fraction"):
        if key in storage:
            evidence[key] = round(storage[key], 3)
    if f.other_cpu_percent or f.steal_percent:
        evidence["other_cpu_percent"] = round(f.other_cpu_percent, 1)
        evidence["steal_percent"] = round(f.steal_percent, 1)
        evidence["other_share_of_usable"] = round(f.other_share, 3)
    if f.cpu_wait_procs is not None:
        evidence["cpu_wait_procs"] = round(f.cpu_wait_procs, 2)
    if f.memory_budget_mb:
        evidence["memory_share_of_budget"] = round(f.peak_memory_mb / f.memory_budget_mb, 3)
    return evidence


_Found = tuple[str, str] | None  # (label, sentence) when a rule applies


def _memory_limited(f: _Figures) -> _Found:
    budget = f.memory_budget_mb
    if not budget or f.peak_memory_mb < MEMORY_HIGH * budget:
        return None
    return (
        MEMORY_LIMITED,
        f"memory is the limit: the loader used {f.peak_memory_mb:.0f} MB of a "
        f"{budget:.0f} MB budget; fewer workers, a lower prefetch_factor or "
        "smaller batches free memory.",
    )


def _copy_bound(f: _Figures) -> _Found:
    if f.copy_share < COPY_HIGH:
        return None
    return (
        COPY_BOUND,
        f"the host-to-device copy takes {f.copy_share:.0%} of a step; pin_memory with "
        "non-blocking copies, or uint8 batches normalised on the device, would help.",
    )


def _compute_bound(f: _Figures) -> _Found:
    if f.data_wait_fraction >= WAIT_LOW:
        return None
    return (
        COMPUTE_BOUND,
        f"the model step is the limit (waiting for data is {f.data_wait_fraction:.0%} of the "
        "time); more workers cannot make it faster.",
    )


def _busy_machine(f: _Figures) -> _Found:
    if f.other_share < OTHER_BUSY:
        return None
    steal = f" and the hypervisor stole {f.steal_percent:.0f}%" if f.steal_percent >= 0.5 else ""
    return (
        BUSY_MACHINE,
        f"other processes kept {f.other_share:.0%} of the {f.usable_cpus} usable CPUs busy "
        f"({f.other_cpu_percent:.0f}% of one core{steal}) while the step waited "
        f"{f.data_wait_fraction:.0%} of the time; the waits are partly theirs, so this figure "
        "says little about loading: measure again on a quieter machine, or compare settings "
        "measured side by side.",
    )


def _loading_in_process(f: _Figures) -> _Found:
    if f.num_workers != 0:
        return None
    return (
        LOADING_IN_PROCESS,
        f"loading runs in the training process and the step waits {f.data_wait_fraction:.0%} "
        "of the time; DataLoader workers would overlap loading with the step.",
    )


def _storage_bound(f: _Figures) -> _Found:
    slots, channel = f.slots, f.channel
    if slots is None or channel is None or max(slots, channel) < STORAGE_BUSY:
        return None
    what = (
        f"its bandwidth is in use {channel:.0%} of the time"
        if channel >= slots
        else f"its read slots are busy {slots:.0%} of the time"
    )
    return (
        STORAGE_BOUND,
        f"the storage is saturated ({what}) and the step waits {f.data_wait_fraction:.0%} "
        "of the time; more workers only queue for it: faster storage, caching or a RAM "
        "copy would help.",
    )


def _cpu_bound_loading(f: _Figures) -> _Found:
    if f.cpu_share < CPU_BUSY:
        return None
    return (
        CPU_BOUND_LOADING,
        f"decoding keeps {f.cpu_share:.0%} of the {f.usable_cpus} usable CPUs busy while the "
        f"step waits {f.data_wait_fraction:.0%} of the time; more workers cannot help, "
        "cheaper decoding, caching decoded samples or uint8 batches can.",
    )


def _cpu_contended(f: _Figures) -> _Found:
    if f.cpu_wait_procs is None or f.cpu_wait_procs < CPU_WAITING:
        return None
    other = f", other work {f.other_cpu_percent:.0f}% of one core" if f.other_cpu_percent else ""
    return (
        CPU_CONTENDED,
        f"the step waits {f.data_wait_fraction:.0%} of the time while {f.cpu_wait_procs:.1f} "
        f"of the loader's processes, on average, wait for a CPU (the kernel's run-queue wait; "
        f"CPUs {f.cpu_share:.0%} busy with the trial{other}): the CPUs are contended, not "
        "the storage; fewer workers or a quieter machine would help, faster storage would not.",
    )


def _io_bound(f: _Figures) -> tuple[str, str]:
    room = (
        f" and the storage's read slots are busy only {f.slots:.0%} of the time"
        if f.slots is not None
        else ""
    )
    if f.cpu_wait_procs is not None:
        room += f", {f.cpu_wait_procs:.1f} of its processes queued for a CPU on average"
    return (
        IO_BOUND,
        f"the step waits {f.data_wait_fraction:.0%} of the time while the CPUs are only "
        f"{f.cpu_share:.0%} busy{room}: workers are waiting on reads; more workers (for "
        "latency-bound reads) or faster storage, caching or a RAM copy would help.",
    )


_RULES: tuple[Callable[[_Figures], _Found], ...] = (
    _memory_limited,
    _copy_bound,
    _compute_bound,
    _busy_machine,
    _loading_in_process,
    _storage_bound,
    _cpu_bound_loading,
    _cpu_contended,
)
"""Tried in order; the first that applies labels the trial, else it is ``io-bound``."""


def diagnose_result(result: Any, memory_budget_mb: float | None = None) -> Diagnosis:
    """:func:`diagnose` for a :class:`~loadertune.record._result.TrialResult`; with several ranks,
    the node's figures, and the slowest rank named with what held it (:func:`slowest_rank`)."""
    found = _diagnose_summary(result, memory_budget_mb)
    idle = getattr(result, "idle_workers", None)
    if idle:
        found = Diagnosis(found.label, f"{found.sentence} {idle_sentence(idle)}", found.evidence)
        found.evidence["idle_workers"] = list(idle)
    ranks = getattr(result, "ranks", None)
    if not ranks:
        return found
    sentence, evidence = slowest_rank(ranks)
    return Diagnosis(found.label, f"{found.sentence} {sentence}", found.evidence | evidence)


def idle_sentence(idle: Sequence[int]) -> str:
    """Workers of an iterable dataset that yielded nothing: more workers than shards."""
    names = ", ".join(str(w) for w in idle)
    return (
        f"Worker{'s' if len(idle) > 1 else ''} {names} yielded nothing (more workers than "
        "the dataset has shards): each costs a process and memory for no data; lower "
        "loader.num_workers or write the data in more shards."
    )


def slowest_rank(ranks: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """The rank that sets the node's pace (the longest window), and where its window went.

    Its time not spent waiting for data is split between copying and stepping as their mean
    times are; a rank's step includes waiting for the others in the step's all-reduce.
    """
    slow = pace_setter(ranks, lambda r: (r.window_s, r.data_wait_fraction))
    wait = min(max(slow.data_wait_fraction, 0.0), 1.0)
    busy = slow.copy_ms_mean + slow.compute_ms_mean
    copy = (1.0 - wait) * (slow.copy_ms_mean / busy if busy > 0 else 0.0)
    shares = {"waiting for data": wait, "copying batches": copy, "stepping": 1.0 - wait - copy}
    held = max(shares, key=lambda k: shares[k])
    parts = ", ".join(f"{name} {100 * share:.0f}%" for name, share in shares.items())
    sentence = (
        f"Slowest of {len(ranks)} ranks: rank {slow.rank} ({slow.time_per_sample_ms:.3f} ms "
        f"per sample of its own), mostly {held} ({parts} of its window)."
    )
    evidence = {"slowest_rank": slow.rank, "slowest_rank_held_by": held}
    return sentence, evidence


def _diagnose_summary(result: Any, memory_budget_mb: float | None) -> Diagnosis:
    s = result.summary
    return diagnose(
        num_workers=result.effective_loader.num_workers,
        data_wait_fraction=s.data_wait_fraction,
        cpu_percent_mean=result.cpu_percent_mean,
        usable_cpus=int(result.machine.get("usable_cpus", 1)),
        copy_ms_mean=s.copy_ms_mean,
        step_time_ms_p50=s.step_time_ms_p50,
        peak_memory_mb=result.peak_memory_mb,
        memory_budget_mb=memory_budget_mb,
        storage=getattr(result, "storage", None),
        other_cpu_percent=getattr(result, "other_cpu_percent", 0.0),
        steal_percent=getattr(result, "steal_percent", 0.0),
        cpu_wait_procs=getattr(result, "cpu_wait_procs", None),
    )
