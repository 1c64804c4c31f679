"""Predict, before any worker starts, settings that would exhaust memory, /dev/shm or descriptors.

The batch size comes from several items spread over the dataset (the largest counts: a small
first item must not hide the real batch). Batches travel from workers to the training process
through shared memory: about ``batch bytes x prefetch_factor x num_workers`` sit in
``/dev/shm`` at once (containers default to 64 MB), and as many again in the training
process's memory. With PyTorch's default ``file_descriptor`` sharing strategy each tensor in
flight also holds an open descriptor. A trial predicted to exceed any of them is refused with
its reason instead of dying of SIGBUS, the OOM killer or "Too many open files" half way; a
batch size the dataset cannot fill, and more workers than the machine could ever hold
(:func:`worker_cap`, the one bound of every ``num_workers`` range), are refused as bad input.
With several ranks on the node (``trial.nproc_per_node``), each runs its own loader with
these settings: memory, /dev/shm and the system's open files are counted for all of them.
"""

from __future__ import annotations

import resource
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from loadertune import datasets
from loadertune.checks._shards import check_shards, shards_of
from loadertune.config import LoaderConfig
from loadertune.config import _torch_rules as torch_rules
from loadertune.errors import ConfigError
from loadertune.record import InfeasibleSetting, Reason

if TYPE_CHECKING:
    from loadertune.checks._shards import Shards

SHM = "/dev/shm"
FILE_NR = "/proc/sys/fs/file-nr"  # file handles allocated, free, most the kernel gives
SHM_HEADROOM = 0.9  # leave a tenth of /dev/shm for everything else
FDS_PER_WORKER = 8  # pipes, queues and bookkeeping each worker holds open
FDS_BASE = 64  # the training process's own files, sockets and libraries
ITEMS_READ = 8  # items read, spread over the dataset, to size a batch
MEMORY_HEADROOM = 0.75  # of the memory available now, as for a sweep's default budget
# A forked worker's own memory, besides the batches it holds: 10 to 14 MB of PSS each measured
# on this project's datasets (docs/method.md), doubled for datasets with heavier libraries.
WORKER_MB = 32.0


@dataclass(frozen=True)
class Batch:
    """One batch a worker keeps in flight: its bytes (in /dev/shm, and again in the training
    process's memory) and its tensors (an open descriptor each, with PyTorch's default
    ``file_descriptor`` sharing). Zero where the batch is not known yet."""

    bytes: int = 0
    tensors: int = 0


@dataclass(frozen=True)
class WorkerCap:
    """The most ``num_workers`` each rank's loader may start, what stops more, and its figures."""

    workers: int
    by: str  # memory | /dev/shm | descriptors | shards
    why: str  # the figures that set it, for a message


def worker_cap(
    nproc_per_node: int = 1,
    batch: Batch | None = None,
    prefetch_factor: int | None = None,
    shards: Shards | None = None,
) -> WorkerCap:
    """The most ``num_workers`` a loader may start on this machine: the one bound of every
    ``num_workers`` range (the default range, the sweep's widened range, AutoLoader's probes)
    and of the refusal (:func:`check_worker_count`).

    No multiple of the CPUs: workers that wait on reads cost no CPU, so latency-bound storage
    is served by more of them than cores. What bounds them is what each holds: its own memory
    (``WORKER_MB``) and ``prefetch_factor`` batches, of this machine's memory; those batches in
    /dev/shm; its descriptors and its batches' tensors, of ``RLIMIT_NOFILE``; and a streaming
    dataset's shards (:mod:`loadertune.checks._shards`). Memory and /dev/shm are shared by the
    ``nproc_per_node`` ranks' loaders, descriptors are each process's own. The sizes, not what
    is free now: the checks of each trial (:func:`check`) count what is free.
    """
    ranks = max(nproc_per_node, 1)
    batch = batch or Batch()
    ahead = prefetch_factor or torch_rules.DEFAULT_PREFETCH_FACTOR
    share = "" if ranks == 1 else f" shared by {ranks} ranks"
    caps = [_memory_cap(batch, ahead, ranks, share), *_descriptor_cap(batch, ahead)]
    caps += _shm_cap(batch.bytes * ahead, ranks, share)
    if shards is not None and not shards.by_sample:
        where = f"the dataset's {shards.count} shards ({shards.source}){share}"
        caps.append(WorkerCap(shards.most_workers(ranks), "shards", where))
    return min(caps, key=lambda c: c.workers)


def _memory_cap(batch: Batch, ahead: int, ranks: int, share: str) -> WorkerCap:
    """Workers and their batches in ``MEMORY_HEADROOM`` of the machine's memory."""
    total = psutil.virtual_memory().total
    held = batch.bytes * ahead
    return WorkerCap(
        int(total * MEMORY_HEADROOM / ranks // (worker_mb(batch, ahead) * 2**20)),
        "memory",
        f"{WORKER_MB:.0f} MB a worker{_batches_mb(held)} in {MEMORY_HEADROOM:.0%} of "
        f"{total / 2**30:.1f} GB of memory{share}",
    )


def _descriptor_cap(batch: Batch, ahead: int) -> list[WorkerCap]:
    """Workers and their batches' tensors in each process's ``RLIMIT_NOFILE`` (none if
    unlimited)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return []
    per_worker = FDS_PER_WORKER + ahead * batch.tensors
    why = f"{per_worker} open descriptors a worker of RLIMIT_NOFILE {soft}"
    return [WorkerCap(max(0, (soft - FDS_BASE) // per_worker), "descriptors", why)]


def _shm_cap(held: int, ranks: int, share: str) -> list[WorkerCap]:
    """Workers' batches (``held`` bytes each) in ``SHM_HEADROOM`` of /dev/shm (none while no
    batch is known, or without a /dev/shm)."""
    if not held:
        return []
    try:
        shm = shutil.disk_usage(SHM).total
    except FileNotFoundError:
        return []
    why = (
        f"{held / 2**20:.1f} MB of batches a worker in {SHM_HEADROOM:.0%} of "
        f"{shm / 2**30:.1f} GB of {SHM}{share}"
    )
    return [WorkerCap(int(shm * SHM_HEADROOM / ranks // held), SHM, why)]


def worker_mb(batch: Batch | None = None, prefetch_factor: int | None = None) -> float:
    """The memory one worker holds, in MB: its own (``WORKER_MB``) and the ``prefetch_factor``
    batches it keeps in flight."""
    ahead = prefetch_factor or torch_rules.DEFAULT_PREFETCH_FACTOR
    return WORKER_MB + (batch or Batch()).bytes * ahead / 2**20


def _batches_mb(held: int) -> str:
    """`` + 1.5 MB of batches`` when a worker's batches are known."""
    return f" + {held / 2**20:.1f} MB of batches" if held else ""


def check_worker_count(loader: LoaderConfig, nproc_per_node: int = 1) -> None:
    """Refuse a ``num_workers`` this machine cannot hold (before any worker starts): more than
    :func:`worker_cap` per rank."""
    cap = worker_cap(nproc_per_node)
    if loader.num_workers <= cap.workers:
        return
    ranks = "" if nproc_per_node <= 1 else f" per rank for {nproc_per_node} ranks"
    raise ConfigError(
        "loader.num_workers",
        loader.num_workers,
        f"would start more worker processes than this machine can hold (at most "
        f"{cap.workers}{ranks}: {cap.why})",
        f"use loader.num_workers<={cap.workers}"
        + (" or fewer trial.nproc_per_node" if ranks else ""),
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


def check_dataset(loader: LoaderConfig, dataset: Any, nproc_per_node: int = 1) -> tuple[Any, Batch]:
    """Raise before any worker starts if the settings cannot work; the first item, and the
    batch each worker keeps in flight (what :func:`worker_cap` counts).

    Every one of ``nproc_per_node`` ranks runs its own loader with these settings: memory,
    /dev/shm and the system's open files are counted for all of them (the node total).

    Raises:
        ConfigError: a batch size the dataset cannot fill.
        InfeasibleSetting: batches in flight beyond memory, /dev/shm or descriptors.
    """
    first, estimates = check(loader, dataset, nproc_per_node)
    return first, Batch(round(estimates["batch_mb"] * 2**20), tensors_per_item(first))


def check(
    loader: LoaderConfig, dataset: Any, nproc_per_node: int = 1
) -> tuple[Any, dict[str, float]]:
    """(the first item, the estimates) once every check passed; see :func:`check_dataset`.

    An iterable dataset (no length, no index) has its shard arithmetic checked
    (:mod:`loadertune.checks._shards`) and is sized from the first items of a pass.
    """
    if datasets.is_iterable(dataset):
        first, item = _iterable_items(loader, dataset, nproc_per_node)
    else:
        check_fills_a_batch(loader, len(dataset))
        first, item = largest_item_bytes(dataset)
    batch = item * int(loader.batch_size or 1)
    estimates = {"item_bytes": float(item), "batch_mb": batch / 2**20}
    ranks = max(nproc_per_node, 1)
    _check_memory(loader, batch, estimates, ranks)
    return first, estimates | _check_shared(loader, first, batch, ranks)


def _iterable_items(loader: LoaderConfig, dataset: Any, nproc_per_node: int) -> tuple[Any, int]:
    """(the first item, the largest of the first few) of an iterable dataset whose shards
    are enough for its readers; a warning where it splits by sample instead."""
    shards = shards_of(datasets.unwrapped(dataset))
    if shards is not None:
        line = check_shards(loader, shards, nproc_per_node)
        if line is not None:
            warnings.warn(f"loadertune: {line}", stacklevel=3)
    items = datasets.first_items(datasets.unwrapped(dataset), ITEMS_READ)
    if not items:
        raise ConfigError(
            "dataset", "empty", "yields no items", "check the dataset's shards or arguments"
        )
    return items[0], max(sample_bytes(item) for item in items)


def _of_ranks(ranks: int) -> str:
    """`` x N ranks`` in a reason when several ranks share the node, else nothing."""
    return f" x {ranks} ranks" if ranks > 1 else ""


def _check_memory(
    loader: LoaderConfig, batch: int, estimates: dict[str, float], ranks: int = 1
) -> None:
    """Batches in flight, the one in use and the one being collated, against free memory,
    in every rank's loader."""
    in_flight = torch_rules.in_flight(loader.num_workers, loader.prefetch_factor)
    need = batch * (in_flight + 2) * ranks
    available = psutil.virtual_memory().available
    estimates["memory_needed_mb"] = need / 2**20
    if need > available * MEMORY_HEADROOM:
        raise InfeasibleSetting(
            Reason.MEMORY_BUDGET,
            f"about {need / 2**20:,.0f} MB of batches at once (batch {batch / 2**20:,.1f} MB x "
            f"{in_flight + 2} in flight and in use{_of_ranks(ranks)}) but "
            f"{available / 2**20:,.0f} MB of memory "
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


def _check_shared(
    loader: LoaderConfig, sample: Any, batch: int, ranks: int = 1
) -> dict[str, float]:
    """Batches in /dev/shm and the descriptors that hold them, with workers, for every rank:
    /dev/shm and the system's open files are the node's, ``RLIMIT_NOFILE`` each process's."""
    if loader.num_workers == 0:
        return {}
    in_flight = torch_rules.in_flight(loader.num_workers, loader.prefetch_factor)
    need = batch * in_flight * ranks
    estimates = {"shm_needed_mb": need / 2**20}
    try:
        free = shutil.disk_usage(SHM).free
        estimates["shm_free_mb"] = free / 2**20
        if need > free * SHM_HEADROOM:
            raise InfeasibleSetting(
                Reason.SHM_EXHAUSTED,
                f"about {need / 2**20:.0f} MB of batches in flight (batch {batch / 2**20:.1f} MB"
                f" x prefetch_factor x num_workers = x{in_flight}{_of_ranks(ranks)}) but {SHM} has "
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
    if ranks > 1:
        estimates["fds_needed_node"] = fds * ranks
        _check_system_files(fds * ranks, ranks)
    return estimates


def _check_system_files(need: int, ranks: int) -> None:
    """Every rank's descriptors against the file handles the kernel has left to give."""
    try:
        allocated, _, most = (int(v) for v in Path(FILE_NR).read_text().split()[:3])
    except (OSError, ValueError):
        return
    if need > most - allocated:
        raise InfeasibleSetting(
            Reason.FD_EXHAUSTED,
            f"about {need} open descriptors needed by {ranks} ranks, the system has "
            f"{most - allocated} file handles left ({FILE_NR}); lower loader.num_workers, "
            "loader.prefetch_factor or trial.nproc_per_node",
        )
