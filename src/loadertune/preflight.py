"""Predict, before any worker starts, settings that would exhaust /dev/shm or descriptors.

Batches travel from workers to the training process through shared memory: about
``batch bytes x prefetch_factor x num_workers`` sit in ``/dev/shm`` at once (containers
default to 64 MB). With PyTorch's default ``file_descriptor`` sharing strategy each tensor
in flight also holds an open descriptor. A trial predicted to exceed either is refused with
its reason instead of dying of SIGBUS or "Too many open files" half way.
"""

from __future__ import annotations

import resource
import shutil
from typing import Any

from loadertune import torch_rules
from loadertune.config import LoaderConfig
from loadertune.failures import InfeasibleSetting

SHM = "/dev/shm"
SHM_HEADROOM = 0.9  # leave a tenth of /dev/shm for everything else
FDS_PER_WORKER = 8  # pipes, queues and bookkeeping each worker holds open
FDS_BASE = 64  # the training process's own files, sockets and libraries


def sample_bytes(sample: Any) -> int:
    """Bytes of the tensors and arrays in one dataset item (nested tuples/lists/dicts)."""
    if hasattr(sample, "nbytes"):
        return int(sample.nbytes)
    if hasattr(sample, "element_size") and hasattr(sample, "numel"):
        return int(sample.element_size() * sample.numel())
    if isinstance(sample, dict):
        return sum(sample_bytes(v) for v in sample.values())
    if isinstance(sample, list | tuple):
        return sum(sample_bytes(v) for v in sample)
    return 8


def tensors_per_item(sample: Any) -> int:
    """Tensors a collated batch of such items holds (one per leaf)."""
    if isinstance(sample, dict):
        return sum(tensors_per_item(v) for v in sample.values())
    if isinstance(sample, list | tuple):
        return sum(tensors_per_item(v) for v in sample)
    return 1


def check(loader: LoaderConfig, sample: Any) -> dict[str, float]:
    """Raise :class:`InfeasibleSetting` if the settings cannot fit; return the estimates."""
    if loader.num_workers == 0:
        return {}
    in_flight = torch_rules.in_flight(loader.num_workers, loader.prefetch_factor)
    batch = sample_bytes(sample) * int(loader.batch_size or 1)
    need = batch * in_flight
    estimates = {"shm_needed_mb": need / 2**20}
    try:
        free = shutil.disk_usage(SHM).free
        estimates["shm_free_mb"] = free / 2**20
        if need > free * SHM_HEADROOM:
            raise InfeasibleSetting(
                "shm_exhausted",
                f"about {need / 2**20:.0f} MB of batches in flight (batch {batch / 2**20:.1f} MB"
                f" x prefetch_factor x num_workers = x{in_flight}) but {SHM} has "
                f"{free / 2**20:.0f} MB free; lower loader.num_workers, loader.prefetch_factor "
                "or loader.batch_size, or enlarge /dev/shm",
            )
    except FileNotFoundError:
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    fds = FDS_BASE + loader.num_workers * FDS_PER_WORKER + in_flight * tensors_per_item(sample)
    estimates["fds_needed"] = fds
    if soft != resource.RLIM_INFINITY and fds > soft:
        raise InfeasibleSetting(
            "fd_exhausted",
            f"about {fds} open descriptors needed, RLIMIT_NOFILE is {soft}; raise it "
            "(ulimit -n) or lower loader.num_workers / loader.prefetch_factor",
        )
    return estimates
