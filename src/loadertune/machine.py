"""What machine a trial ran on: recorded with every trial, since timings only compare within one."""

from __future__ import annotations

import os
import platform
import socket
from functools import cache
from typing import Any

import psutil


def usable_cpus() -> int:
    """CPUs this process may run on (affinity and cgroup cpusets), not the host's total."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


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
    import torch
    import torch.multiprocessing as mp

    info: dict[str, Any] = {
        "host": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count() or 1,
        "usable_cpus": usable_cpus(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "default_start_method": mp.get_start_method(allow_none=True)
        or mp.get_all_start_methods()[0],
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
    }
    return info


def memory_budget_bytes(budget_mb: float | None) -> int:
    """A trial's process-tree memory budget: as configured, or 3/4 of what is available now."""
    if budget_mb is not None:
        return int(budget_mb * 2**20)
    return int(psutil.virtual_memory().available * 0.75)
