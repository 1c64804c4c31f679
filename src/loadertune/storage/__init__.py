"""Where a dataset's bytes live while a trial reads them.

- ``local``: files read where they are, the page cache as the OS leaves it.
- ``cold``: files evicted from the page cache (``posix_fadvise``) before each trial, so every
  trial reads from the device and trial order does not favour later trials.
- ``memory``: files copied to a RAM file system (``/dev/shm``) for the trial, removed after.
- ``throttled`` (presets ``hdd``, ``nfs``): a simulated slow device with per-read latency and
  a bandwidth shared by all worker processes together, like one real disk.

A trial opens a :class:`StorageSession` with :func:`open_storage`; datasets place their files
with it and read through its :class:`Reader`, so they need not know which storage it is.

Rooms: ``_session`` (one trial's storage and its cost), ``_reader`` (how datasets read their
bytes), ``_device`` (the simulated device's shared budget), ``_page_cache`` (what the OS holds,
dropped without root), ``_scratch`` (per-trial RAM folders and a killed trial's leftovers).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from loadertune.config import (
    AnyStorageConfig,
    ColdStorageConfig,
    CustomDatasetConfig,
    DatasetConfig,
    MemoryStorageConfig,
    ThrottledStorageConfig,
)
from loadertune.errors import ConfigError
from loadertune.storage import _scratch
from loadertune.storage._device import SharedDevice
from loadertune.storage._page_cache import can_evict
from loadertune.storage._reader import Reader, ThrottledReader
from loadertune.storage._session import StorageSession, session_for

__all__ = [
    "Reader",
    "SharedDevice",
    "StorageSession",
    "ThrottledReader",
    "check_storage",
    "open_storage",
    "ranks_folder",
    "remove_stale_scratch",
]


@contextmanager
def open_storage(config: AnyStorageConfig) -> Iterator[StorageSession]:
    """A session for one trial on ``config``; what it made is removed when the block exits."""
    session = session_for(config)
    try:
        yield session
    finally:
        session.close()


def remove_stale_scratch() -> list[Path]:
    """Remove the RAM copies and device files of this user's trials whose process has exited,
    and the launcher logs of their ranks (:func:`ranks_folder`).

    They live in ``/dev/shm`` (else the temp folder), the logs in the temp folder.
    A trial removes its own when it ends; one killed with SIGKILL (pruned, timed out) cannot.
    The next trial's storage (or ranks) removes them, and the sweep does after each trial
    process ends.
    """

    temp = Path(tempfile.gettempdir())
    removed = _scratch.remove_stale(_scratch.default_parent())
    return removed + _scratch.remove_stale(temp, _scratch.RANKS_PREFIX)


@contextmanager
def ranks_folder() -> Iterator[Path]:
    """A folder in the temp folder for the launcher's logs of this process's ranks, removed
    when the block exits; the folders of processes killed before they could remove theirs go
    first (named ``loadertune-ranks-<pid>-<random>``, like the storage's scratch folders)."""

    path = _scratch.make_scratch(Path(tempfile.gettempdir()), _scratch.RANKS_PREFIX)
    try:
        yield path
    finally:
        _scratch.remove(path)


def check_storage(storage: AnyStorageConfig, dataset: DatasetConfig) -> None:
    """Reject storage settings that cannot work, before anything is built."""
    if storage.name != "local" and isinstance(dataset, CustomDatasetConfig):
        raise ConfigError(
            "storage.name",
            storage.name,
            "needs a dataset whose files loadertune knows, but dataset=custom reads its own",
            "use storage=local with dataset=custom, or a built-in dataset "
            "(image_folder reads your own images)",
        )
    if isinstance(storage, ThrottledStorageConfig):
        _check_throttled(storage)
    elif isinstance(storage, MemoryStorageConfig):
        if not Path(storage.dir).is_dir():
            raise ConfigError(
                "storage.dir",
                storage.dir,
                "is not an existing directory",
                "point it at a RAM file system, e.g. storage.dir=/dev/shm",
            )
    elif isinstance(storage, ColdStorageConfig) and not can_evict():
        raise ConfigError(
            "storage.name",
            "cold",
            "needs posix_fadvise to evict files from the page cache (Linux)",
            "use storage=local on this platform",
        )


def _check_throttled(storage: ThrottledStorageConfig) -> None:
    if not storage.latency_ms >= 0:
        raise ConfigError(
            "storage.latency_ms", storage.latency_ms, "must be >= 0", "e.g. storage.latency_ms=10"
        )
    if not storage.bandwidth_mb_s > 0:
        raise ConfigError(
            "storage.bandwidth_mb_s",
            storage.bandwidth_mb_s,
            "must be > 0",
            "e.g. storage.bandwidth_mb_s=160",
        )
    if storage.queue_depth < 1:
        raise ConfigError(
            "storage.queue_depth",
            storage.queue_depth,
            "must be >= 1 (reads the device serves at once)",
            "e.g. storage.queue_depth=1 for a disk, 16 for a network file system",
        )
    if storage.stall_every < 0:
        raise ConfigError(
            "storage.stall_every",
            storage.stall_every,
            "must be >= 0 (about one read in this many stalls; 0: none)",
            "e.g. storage.stall_every=40 storage.stall_ms=120 for an object store's cold misses",
        )
    if not storage.stall_ms >= 0:
        raise ConfigError(
            "storage.stall_ms",
            storage.stall_ms,
            "must be >= 0 (milliseconds a stalled read waits past storage.latency_ms)",
            "e.g. storage.stall_ms=120",
        )
