"""Samples stored as rows of numpy ``.npy`` shards and read through memory maps.

The workload of a pre-processed dataset (decoded images, features, audio frames): a read is a
copy of a few kilobytes out of a large file, with no decoding, so storage speed and the copy
dominate. Each process opens the shards lazily with ``np.load(mmap_mode="r")``; the dataset
itself holds only paths and offsets (numpy arrays), so it pickles small for spawned workers
and keeps nothing per worker but the maps, whose pages the OS shares.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from loadertune._lazy import torch
from loadertune.config import ArrayShardsConfig
from loadertune.datasets._cache import digest, ensure_generated
from loadertune.storage import Reader

LABELS = "labels.npy"


def cache_key(cfg: ArrayShardsConfig) -> str:
    """A folder name that changes whenever a generator knob changes."""
    knobs = {k: v for k, v in asdict(cfg).items() if k not in ("name", "root")}
    shape = "x".join(str(d) for d in cfg.sample_shape)
    return f"array_shards-{cfg.count}x{shape}-{cfg.dtype}-{digest(knobs)}"


def ensure_array_shards(cfg: ArrayShardsConfig, cache_dir: Path) -> Path:
    """The generated shards' folder, made first if it is not in the cache."""
    return ensure_generated(cache_dir, cache_key(cfg), asdict(cfg), lambda d: _write(cfg, d))


def _write(cfg: ArrayShardsConfig, out: Path) -> None:
    rng = np.random.default_rng(cfg.seed)
    dtype = np.dtype(cfg.dtype)
    for index, start in enumerate(range(0, cfg.count, cfg.shard_size)):
        shape = (min(cfg.shard_size, cfg.count - start), *cfg.sample_shape)
        if dtype.kind == "f":
            rows = rng.standard_normal(size=shape, dtype=np.float32).astype(dtype)
        else:
            info = np.iinfo(dtype)
            rows = rng.integers(info.min, int(info.max) + 1, size=shape, dtype=dtype)
        np.save(out / f"shard_{index:05d}.npy", rows)
    labels = np.arange(cfg.count, dtype=np.int64) % cfg.num_classes
    np.save(out / LABELS, labels)


class ArrayShardsDataset:
    """Rows of ``root/*.npy`` (sorted; the first axis indexes samples), with ``labels.npy``.

    Each item is ``(tensor, label)``, or the tensor alone when there is no ``labels.npy``; the
    tensor keeps the shard's dtype (a model casts it on the device, as real pipelines do).
    """

    def __init__(self, root: str | Path, reader: Reader | None = None) -> None:
        root = Path(root)
        shards = sorted(p for p in root.glob("*.npy") if p.name != LABELS)
        if not shards:
            raise FileNotFoundError(f"no .npy shards under {root}")
        counts = []
        first = np.load(shards[0], mmap_mode="r")
        for path in shards:
            rows = np.load(path, mmap_mode="r")
            if rows.shape[1:] != first.shape[1:] or rows.dtype != first.dtype:
                raise ValueError(
                    f"{path} holds {rows.dtype} rows shaped {rows.shape[1:]}, but "
                    f"{shards[0]} holds {first.dtype} rows shaped {first.shape[1:]}"
                )
            counts.append(rows.shape[0])
        self.root = root
        self.reader = reader or Reader()
        self.sample_shape = tuple(int(d) for d in first.shape[1:])
        self.dtype = str(first.dtype)
        self.sample_nbytes = int(np.prod(self.sample_shape)) * first.dtype.itemsize
        self._paths = np.array([str(p) for p in shards], dtype=np.bytes_)
        self._ends = np.cumsum(np.array(counts, dtype=np.int64))
        labels_path = root / LABELS
        self._labels_path = str(labels_path) if labels_path.exists() else None
        self.num_classes = 0
        if self._labels_path is not None:
            self.num_classes = int(np.load(self._labels_path, mmap_mode="r").max()) + 1
        self._maps: dict[int, Any] = {}
        self._pid = os.getpid()

    def __len__(self) -> int:
        return int(self._ends[-1])

    def __getitem__(self, index: int) -> Any:
        if not 0 <= index < len(self):
            raise IndexError(index)
        shard = int(np.searchsorted(self._ends, index, side="right"))
        row = index - (int(self._ends[shard - 1]) if shard else 0)
        rows = self._map(shard)
        self.reader.charge(self.sample_nbytes)
        sample = torch.from_numpy(np.array(rows[row]))
        if self._labels_path is None:
            return sample
        return sample, int(self._map(-1)[index])

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_maps"] = {}  # maps are reopened by each process, never pickled as arrays
        return state

    def _map(self, shard: int) -> Any:
        if self._pid != os.getpid():
            self._maps, self._pid = {}, os.getpid()
        rows = self._maps.get(shard)
        if rows is None:
            path = self._paths[shard].decode() if shard >= 0 else str(self._labels_path)
            rows = self._maps[shard] = np.load(path, mmap_mode="r")
        return rows
