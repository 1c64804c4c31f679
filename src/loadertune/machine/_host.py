"""What machine a trial ran on: recorded with every trial, since timings only compare within one."""

from __future__ import annotations

import os
import platform
import socket
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import psutil

from loadertune._lazy import torch, torch_mp

CpuSource = Literal["affinity", "cgroup", "slurm"]
SLURM_KEYS = ("SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE")  # the first one set counts
CGROUP_V1_MOUNT = "sys/fs/cgroup/cpu"  # where the cpu controller sits when mountinfo says not
CGROUP_V2_MOUNTS = ("sys/fs/cgroup", "sys/fs/cgroup/unified")  # unified, then hybrid layout


@dataclass(frozen=True)
class CpuBudget:
    """The CPUs a process may keep busy, the smallest of three limits, and which one set it.

    ``affinity``: the CPUs the scheduler may run it on (``sched_getaffinity``, cpusets).
    ``cgroup_cpus``: the CPU time its cgroup's quota grants, in CPUs (quota / period, v2
    ``cpu.max`` or v1 ``cpu.cfs_quota_us``); None without a quota. A container started with
    ``--cpus=2`` lists every core of the host in its affinity mask but gets 2 CPUs of time.
    ``slurm``: ``SLURM_CPUS_PER_TASK`` (else ``SLURM_CPUS_ON_NODE``); None outside SLURM.
    """

    count: int
    source: CpuSource
    affinity: int
    cgroup_cpus: float | None = None
    slurm: int | None = None


def cpu_budget(root: Path = Path("/"), env: Mapping[str, str] | None = None) -> CpuBudget:
    """This process's :class:`CpuBudget`; ``root`` and ``env`` stand in for ``/`` and
    ``os.environ`` (tests point them at fixture files)."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        affinity = os.cpu_count() or 1
    quota = cgroup_cpu_quota(root)
    slurm = slurm_cpus(os.environ if env is None else env)
    count: int = affinity
    source: CpuSource = "affinity"
    limits: tuple[tuple[float | None, CpuSource], ...] = ((quota, "cgroup"), (slurm, "slurm"))
    for limit, name in limits:
        if limit is not None and max(1, int(limit)) < count:  # a quota rounds down
            count, source = max(1, int(limit)), name
    return CpuBudget(count, source, affinity, quota, slurm)


def usable_cpus() -> int:
    """CPUs this process may keep busy (affinity, cgroup quota, SLURM), not the host's total."""
    return cpu_budget().count


def cpus_per_rank(nproc_per_node: int, cpus: int | None = None) -> int:
    """The usable CPUs each of ``nproc_per_node`` ranks on the node gets (1 at least): every
    rank builds its own DataLoader, so its workers share this many CPUs, not the node's."""
    total = usable_cpus() if cpus is None else cpus
    return max(1, total // max(nproc_per_node, 1))


def local_world_size(env: Mapping[str, str] | None = None, otherwise: int = 1) -> int:
    """Ranks on this node as the launcher says (torchrun's ``LOCAL_WORLD_SIZE``), else
    ``otherwise`` (1: no launcher; inside a process group its caller may know better)."""
    value = (os.environ if env is None else env).get("LOCAL_WORLD_SIZE", "")
    return max(1, int(value)) if value.strip().isdigit() else otherwise


def slurm_cpus(env: Mapping[str, str]) -> int | None:
    """The CPUs SLURM allocated to this task, or None outside SLURM (or none readable).

    A variable set to something that is no positive count (``abc``, ``0``, ``-4``) is named
    in a warning and skipped, so the next one (``SLURM_CPUS_ON_NODE``) still counts.
    """
    for key in SLURM_KEYS:
        value = env.get(key, "").strip()
        if not value:
            continue
        count = _positive_count(value.split("(")[0])  # "4(x2)", as some SLURM counts read
        if count is not None:
            return count
        warnings.warn(
            f"loadertune: {key}={value} is not a positive CPU count; ignored (the next CPU "
            "limit counts instead): unset it or set it to the task's CPUs",
            stacklevel=2,
        )
    return None


def _positive_count(text: str) -> int | None:
    """``text`` as an integer of at least 1, or None."""
    try:
        count = int(text)
    except ValueError:
        return None
    return count if count >= 1 else None


def cgroup_cpu_quota(root: Path = Path("/")) -> float | None:
    """CPUs' worth of time this process's cgroup (or an ancestor) grants, or None: no quota.

    The cgroup comes from ``/proc/self/cgroup``: its ``cpu`` controller line under cgroup v1,
    its ``0::`` line under v2; its directory is looked up under the hierarchy's mount point
    (``/proc/self/mountinfo``), and the smallest quota from it up to the mount's root counts.
    """
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    mounts = _cgroup_mounts(root)
    limits: list[float] = []
    for line in lines:
        controllers, _, path = line.partition(":")[2].partition(":")
        if "cpu" in controllers.split(","):
            for mount in mounts.get("cpu", [(CGROUP_V1_MOUNT, "/")]):
                limits += _walk(root, mount, path, _v1_quota)
        elif controllers == "":
            for mount in mounts.get("", [(m, "/") for m in CGROUP_V2_MOUNTS]):
                limits += _walk(root, mount, path, _v2_quota)
    return min(limits) if limits else None


def _cgroup_mounts(root: Path) -> dict[str, list[tuple[str, str]]]:
    """(mount point, root within the hierarchy) of the v1 ``cpu`` and the v2 (``""``) ones."""
    found: dict[str, list[tuple[str, str]]] = {}
    try:
        text = (root / "proc/self/mountinfo").read_text()
    except OSError:
        return found
    for line in text.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        fstype, *rest = line.partition(" - ")[2].split() or [""]
        options = rest[1] if len(rest) > 1 else ""
        point = fields[4].lstrip("/")
        if fstype == "cgroup2":
            found.setdefault("", []).append((point, fields[3]))
        elif fstype == "cgroup" and "cpu" in options.split(","):
            found.setdefault("cpu", []).append((point, fields[3]))
    return found


def _walk(
    root: Path, mount: tuple[str, str], path: str, read: Callable[[Path], float | None]
) -> list[float]:
    """The quotas (in CPUs) set on ``path`` and its ancestors, below ``mount``'s root."""
    point, mount_root = mount
    rel = PurePosixPath(path)
    if mount_root != "/" and rel.is_relative_to(mount_root):
        rel = rel.relative_to(mount_root)  # a container's view: the mount's root is its cgroup
    parts = [p for p in rel.parts if p != "/"]
    found = []
    for depth in range(len(parts), -1, -1):
        directory = root / point / Path(*parts[:depth])
        if directory.is_dir():
            quota = read(directory)
            if quota is not None:
                found.append(quota)
    return found


def _v1_quota(directory: Path) -> float | None:
    """``cpu.cfs_quota_us / cpu.cfs_period_us``; None for -1 (no limit) or no such files."""
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text())
        period = int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def _v2_quota(directory: Path) -> float | None:
    """``cpu.max`` as ``quota period``; None for ``max`` (no limit) or no such file."""
    try:
        quota, period = (directory / "cpu.max").read_text().split()[:2]
        return int(quota) / int(period) if int(period) > 0 else None
    except (OSError, ValueError):  # "max": no limit
        return None


@cache
def cpu_model() -> str:
    """The CPU's marketing name, best effort."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict[str, Any]:
    """Host, CPUs, memory, torch and accelerator, as tags for MLflow."""
    budget = cpu_budget()
    info: dict[str, Any] = {
        "host": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count() or 1,
        "usable_cpus": budget.count,
        "usable_cpus_source": budget.source,
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "default_start_method": torch_mp.get_start_method(allow_none=True)
        or torch_mp.get_all_start_methods()[0],
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
    }
    return info


def memory_budget_bytes(budget_mb: float | None) -> int:
    """A trial's process-tree memory budget: as configured, or 3/4 of what is available now."""
    if budget_mb is not None:
        return int(budget_mb * 2**20)
    return int(psutil.virtual_memory().available * 0.75)
