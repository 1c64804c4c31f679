"""One trial's storage: where it reads the dataset from, how, and what that cost.

A session is opened before the dataset is built and closed after the trial. Datasets ask it
to :meth:`~StorageSession.place` their files (the ``memory`` storage copies them to a RAM
file system; the others leave them) and read through its :attr:`~StorageSession.reader`.
The trial calls :meth:`~StorageSession.before_loading` just before the first batch (``cold``
evicts the files then) and brackets the timed window, so each storage can report figures.
"""

from __future__ import annotations

import math
import shutil
import time
from pathlib import Path

from loadertune.config import (
    AnyStorageConfig,
    ColdStorageConfig,
    MemoryStorageConfig,
    ThrottledStorageConfig,
)
from loadertune.errors import ConfigError
from loadertune.storage import _page_cache, _scratch
from loadertune.storage._device import DeviceCounters, SharedDevice, Stall
from loadertune.storage._reader import Reader, ThrottledReader


class StorageSession:
    """``local``: files read where they are; reports how much of them the page cache held."""

    def __init__(self, config: AnyStorageConfig) -> None:
        self.config = config
        self.reader: Reader = Reader()
        self.placed: list[Path] = []
        self.figures: dict[str, float] = {"storage_prepare_s": 0.0}

    def place(self, path: Path) -> Path:
        """Where the trial reads ``path`` (a file or a folder) from."""
        self.placed.append(path)
        return path

    def before_loading(self) -> None:
        """Called once, just before the loader's first batch is asked for."""
        self._measure_cache()

    def window_started(self) -> None:
        """The timed window begins."""

    def window_ended(self, window_s: float) -> None:
        """The timed window ended after ``window_s`` seconds."""

    def close(self) -> None:
        """Release what the session made (idempotent)."""

    def _measure_cache(self) -> None:
        fraction = _page_cache.resident_fraction(_page_cache.files_under(self.placed))
        if not math.isnan(fraction):
            self.figures["storage_cached_fraction"] = fraction


class ColdSession(StorageSession):
    """``cold``: the files are evicted from the page cache just before the first batch."""

    def before_loading(self) -> None:
        start = time.perf_counter()
        _files, nbytes = _page_cache.evict(_page_cache.files_under(self.placed))
        self.figures["storage_prepare_s"] = time.perf_counter() - start
        self.figures["storage_evicted_mb"] = nbytes / 1e6
        self._measure_cache()


class MemorySession(StorageSession):
    """``memory``: the files are copied to a RAM file system for this trial, removed after."""

    def __init__(self, config: MemoryStorageConfig) -> None:
        super().__init__(config)
        self.dir = Path(config.dir)
        self.scratch = _scratch.make_scratch(self.dir)

    def place(self, path: Path) -> Path:
        files = list(_page_cache.files_under([path]))
        need = sum(f.stat().st_size for f in files)
        free = shutil.disk_usage(self.scratch).free
        if need > 0.9 * free:
            raise ConfigError(
                "storage.dir",
                str(self.dir),
                f"has {free / 1e6:,.0f} MB free but the dataset is {need / 1e6:,.0f} MB "
                "(and batches in flight need shared memory too)",
                "point storage.dir at a larger tmpfs, or use a smaller dataset",
            )
        start = time.perf_counter()
        target = self.scratch / f"{len(self.placed)}-{path.name}"
        if path.is_dir():
            shutil.copytree(path, target)
        else:
            shutil.copy2(path, target)
        self.figures["storage_prepare_s"] += time.perf_counter() - start
        self.figures["storage_copied_mb"] = self.figures.get("storage_copied_mb", 0.0) + need / 1e6
        return super().place(target)

    def close(self) -> None:
        _scratch.remove(self.scratch)


class ThrottledSession(StorageSession):
    """``throttled`` / ``hdd`` / ``nfs``: every read waits for one simulated shared device."""

    def __init__(self, config: ThrottledStorageConfig) -> None:
        super().__init__(config)
        self.scratch = _scratch.make_scratch(_scratch.default_parent())
        self.device = SharedDevice.create(
            self.scratch / "device",
            config.latency_ms,
            config.bandwidth_mb_s,
            config.queue_depth,
            Stall(config.stall_every, config.stall_ms),
        )
        self.reader = ThrottledReader(self.device)
        self._window_start: DeviceCounters | None = None

    def before_loading(self) -> None:
        """Nothing to prepare: the device is the same every trial, whatever the cache holds."""

    def window_started(self) -> None:
        self._window_start = self.device.counters()

    def window_ended(self, window_s: float) -> None:
        if self._window_start is None or window_s <= 0:
            return
        end, start = self.device.counters(), self._window_start
        self.figures["storage_read_mb_per_s"] = (end.bytes - start.bytes) / 1e6 / window_s
        self.figures["storage_reads_per_s"] = (end.reads - start.reads) / window_s
        # Share of the device's capacity in use (every slot held all the time = 1) and share
        # of the window the shared channel was transferring (bandwidth saturated = 1).
        depth = self.device.queue_depth
        self.figures["storage_busy_fraction"] = (end.held_s - start.held_s) / window_s / depth
        self.figures["storage_bandwidth_fraction"] = (end.busy_s - start.busy_s) / window_s

    def close(self) -> None:
        self.device.close()
        _scratch.remove(self.scratch)


def session_for(config: AnyStorageConfig) -> StorageSession:
    """The session class for a storage config."""
    if isinstance(config, ThrottledStorageConfig):
        return ThrottledSession(config)
    if isinstance(config, MemoryStorageConfig):
        return MemorySession(config)
    if isinstance(config, ColdStorageConfig):
        return ColdSession(config)
    return StorageSession(config)
