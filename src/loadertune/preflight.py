"""Predict, before any worker starts, settings that would exhaust memory, /dev/shm or descriptors.

The batch size comes from several items spread over the dataset (the largest counts: a small
first item must not hide the real batch). Batches travel from workers to the training process
through shared memory: about ``batch bytes x prefetch_factor x num_workers`` sit in
``/dev/shm`` at once (containers default to 64 MB), and as many again in the training
process's memory. With PyTorch's default ``file_descriptor`` sharing strategy each tensor in
flight also holds an open descriptor. A trial predicted to exceed any of them is refused with
its reason instead of dying of SIGBUS, the OOM killer or "Too many open files" half way; a
batch size the dataset cannot fill, and more workers than the machine could ever use, are
refused as bad input.
"""

from __future__ import annotations

import resource
import shutil
from typing import Any

import psutil

from loadertune import torch_rules
from loadertune.config import LoaderConfig
from loadertune.errors import ConfigError
from loadertune.failures import InfeasibleSetting, Reason
from loadertune.machine import usable_cpus

SHM = "/dev/shm"
SHM_HEADROOM = 0.9  # leave a tenth of /dev/shm for everything else
FDS_PER_WORKER = 8  # pipes, queues and bookkeeping each worker holds open
FDS_BASE = 64  # the training process's own files, sockets and libraries
ITEMS_READ = 8  # items read, spread over the dataset, to size a batch
MEMORY_HEADROOM = 0.75  # of the memory available now, as for a sweep's default budget
WORKERS_PER_CPU = 8  # beyond this, workers only queue (the guess's range stops here too)
MIN_WORKER_CAP = 32


def worker_cap(cpus: int | None = None) -> int:
    """The most ``num_workers`` a trial may start on this machine: 8 per usable CPU, 32 at
    least. Latency-bound storage is served by workers beyond the CPUs, a thousand workers
    only by the OOM killer."""
    return max(MIN_WORKER_CAP, WORKERS_PER_CPU * (cpus or usable_cpus()))


def check_worker_count(loader: LoaderConfig) -> None:
    """Refuse a ``num_workers`` no machine of this size can use (before any worker starts)."""
    cap = worker_cap()
    if loader.num_workers > cap:
        raise ConfigError(
            "loader.num_workers",
            loader.num_workers,
            f"would start more worker processes than this machine can use ({usable_cpus()} "
            f"usable CPUs; at most {cap}, {WORKERS_PER_CPU} per CPU)",
            f"e.g. loader.num_workers={min(cap, 2 * usable_cpus())}",
        )


def spread_indices(length: int, count: int = ITEMS_READ) -> list[int]:
    """``count`` indices spread evenly over ``range(length)``, first and last included."""
    if length <= count:
        return list(range(length))
    return sorted({round(i * (length - 1) / (count - 1)) for i in range(count)})


def largest_item_bytes(dataset: Any) -> tuple[Any, int]:
    """(the first item, the bytes of the largest of several items spread over the dataset)."""
    items = [dataset[i] for i in spread_indices(len(dataset))]
    if not items:
        raise ConfigError("dataset", "empty", "has no items", "check the dataset's path or size")
    return items[0], max(sample_bytes(item) for item in items)


def check_fills_a_batch(loader: LoaderConfig, length: int) -> None:
    """A batch larger than the dataset: with drop_last no batch at all, else one short one."""
    bs = int(loader.batch_size or 1)
    if bs <= length:
        return
    happens = (
        "a DataLoader with drop_last=true yields no batch at all"
        if loader.drop_last
        else "each epoch is one short batch, not the batch size being measured"
    )
    raise ConfigError(
        "loader.batch_size",
        bs,
        f"is larger than the dataset ({length} items): {happens}",
        f"use loader.batch_size<={length}, or a larger dataset",
    )


def check_dataset(loader: LoaderConfig, dataset: Any) -> Any:
    """Raise before any worker starts if the settings cannot work; the first item.

    Raises:
        ConfigError: a batch size the dataset cannot fill.
        InfeasibleSetting: batches in flight beyond memory, /dev/shm or descriptors.
    """
    first, _ = check(loader, dataset)
    return first


def check(loader: LoaderConfig, dataset: Any) -> tuple[Any, dict[str, float]]:
    """(the first item, the estimates) once every check passed; see :func:`check_dataset`."""
    check_fills_a_batch(loader, len(dataset))
    first, item = largest_item_bytes(dataset)
    batch = item * int(loader.batch_size or 1)
    estimates = {"item_bytes": float(item), "batch_mb": batch / 2**20}
    _check_memory(loader, batch, estimates)
    return first, estimates | _check_shared(loader, first, batch)


def _check_memory(loader: LoaderConfig, batch: int, estimates: dict[str, float]) -> None:
    """Batches in flight, the one in use and the one being collated, against free memory."""
    in_flight = torch_rules.in_flight(loader.num_workers, loader.prefetch_factor)
    need = batch * (in_flight + 2)
    available = psutil.virtual_memory().available
    estimates["memory_needed_mb"] = need / 2**20
    if need > available * MEMORY_HEADROOM:
        raise InfeasibleSetting(
            Reason.MEMORY_BUDGET,
            f"about {need / 2**20:,.0f} MB of batches at once (batch {batch / 2**20:,.1f} MB x "
            f"{in_flight + 2} in flight and in use) but {available / 2**20:,.0f} MB of memory "
            "is available; lower loader.batch_size, loader.num_workers or "
            "loader.prefetch_factor",
        )


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


def _check_shared(loader: LoaderConfig, sample: Any, batch: int) -> dict[str, float]:
    """Batches in /dev/shm and the descriptors that hold them, with workers."""
    if loader.num_workers == 0:
        return {}
    in_flight = torch_rules.in_flight(loader.num_workers, loader.prefetch_factor)
    need = batch * in_flight
    estimates = {"shm_needed_mb": need / 2**20}
    try:
        free = shutil.disk_usage(SHM).free
        estimates["shm_free_mb"] = free / 2**20
        if need > free * SHM_HEADROOM:
            raise InfeasibleSetting(
                Reason.SHM_EXHAUSTED,
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
            Reason.FD_EXHAUSTED,
            f"about {fds} open descriptors needed, RLIMIT_NOFILE is {soft}; raise it "
            "(ulimit -n) or lower loader.num_workers / loader.prefetch_factor",
        )
    return estimates
