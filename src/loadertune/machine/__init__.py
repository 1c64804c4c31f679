"""The machine a trial runs on: what it is, and what else used it while a trial was measured.

Rooms (the names other packages use are re-exported below, each room imported on the first
use of one of its names, so importing the package imports none of them):

- ``_host``: what machine a trial ran on: recorded with every trial, since timings only compare
  within one.
- ``_interference``: how much of the machine other work took while something was measured.
- ``_monitor``: sample the trial's process tree (main process and every DataLoader worker) with
  psutil.
- ``_run_queue``: how long a process tree waited for a CPU: the kernel's run-queue wait, per
  process.
- ``_tree_sampler``: a light process beside the trial that samples its process tree: CPU often,
  memory rarely.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadertune._lazy import lazy_package

__all__ = [
    "CGROUP_V1_MOUNT",
    "CGROUP_V2_MOUNTS",
    "QUIET_SHARE",
    "SLURM_KEYS",
    "CpuBudget",
    "CpuSource",
    "Interference",
    "InterferenceMeter",
    "ProcessTreeMonitor",
    "ResourceSample",
    "SamplerReport",
    "Sched",
    "TreeSampler",
    "cgroup_cpu_quota",
    "cpu_budget",
    "cpu_model",
    "cpus_per_rank",
    "local_world_size",
    "machine_info",
    "measure_interference",
    "memory_budget_bytes",
    "other_share",
    "peak_memory_bytes",
    "queued_s",
    "run_waits",
    "slurm_cpus",
    "usable_cpus",
]

if TYPE_CHECKING:
    from loadertune.machine._host import (
        CGROUP_V1_MOUNT,
        CGROUP_V2_MOUNTS,
        SLURM_KEYS,
        CpuBudget,
        CpuSource,
        cgroup_cpu_quota,
        cpu_budget,
        cpu_model,
        cpus_per_rank,
        local_world_size,
        machine_info,
        memory_budget_bytes,
        slurm_cpus,
        usable_cpus,
    )
    from loadertune.machine._interference import (
        QUIET_SHARE,
        Interference,
        InterferenceMeter,
        measure_interference,
        other_share,
    )
    from loadertune.machine._monitor import ProcessTreeMonitor, ResourceSample, peak_memory_bytes
    from loadertune.machine._run_queue import Sched, queued_s, run_waits
    from loadertune.machine._tree_sampler import SamplerReport, TreeSampler

__getattr__ = lazy_package(__name__, __file__)
