"""Token sequences in a Hugging Face ``datasets`` dataset on disk, read in iterable mode.

How language-model pipelines stream: a dataset saved with ``Dataset.save_to_disk`` (Arrow
files, memory-mapped), turned into an ``IterableDataset`` with
``to_iterable_dataset(num_shards=...)``. ``datasets`` gives each DataLoader worker whole
shards (and stops the workers beyond ``num_shards``, with a log line), splits them by rank
with ``datasets.distributed.split_dataset_by_node`` and, with ``shuffle_buffer``, shuffles
the shard order and a buffer of samples per worker (in that worker's memory, which the
process-tree memory counts). Each row is ``seq_len + 1`` token ids, returned as the
``(input, next-token target)`` pair :class:`~loadertune.datasets.tokens.TokenDataset` gives,
for ``model=transformer``.

A throttled storage charges each row's bytes as it is read (the Arrow files are memory
maps); ``cold`` and ``memory`` apply to the saved folder. Needs the ``streaming`` extra;
imported only when used.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset

from loadertune._lazy import dist, hf_datasets, hf_distributed, torch
from loadertune.config import HFIterableConfig
from loadertune.datasets._cache import digest, ensure_generated
from loadertune.storage import Reader

TOKEN_BYTES = 4  # ids stored as int32
GENERATOR_KNOBS = ("count", "seq_len", "vocab_size", "seed")


def cache_key(cfg: HFIterableConfig) -> str:
    """A folder name that changes whenever a generator knob changes."""
    knobs = {k: v for k, v in asdict(cfg).items() if k in GENERATOR_KNOBS}
    return f"hf_iterable-{cfg.count}x{cfg.seq_len}-{digest(knobs)}"


def ensure_hf_dataset(cfg: HFIterableConfig, cache_dir: Path) -> Path:
    """The saved dataset's folder, written once (under ``paths.dataset_cache``)."""
    meta = {k: v for k, v in asdict(cfg).items() if k in GENERATOR_KNOBS}
    return ensure_generated(cache_dir, cache_key(cfg), meta, lambda d: _write(cfg, d))


def _write(cfg: HFIterableConfig, out: Path) -> None:
    rng = np.random.default_rng(cfg.seed)
    ids = rng.integers(0, cfg.vocab_size, size=(cfg.count, cfg.seq_len + 1), dtype=np.int32)
    hf_datasets.disable_progress_bars()
    hf_datasets.Dataset.from_dict({"input_ids": ids}).save_to_disk(str(out / "data"))


def node() -> tuple[int, int]:
    """(rank, world size) of this process: ``torch.distributed`` once initialised, else the
    launcher's ``RANK``/``WORLD_SIZE`` (which a DataLoader worker inherits)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


class HFTokenStream(IterableDataset[tuple[Any, Any]]):
    """``(input, target)`` int64 sequences from a saved ``datasets`` dataset in iterable mode;
    ``num_shards`` is the shard count the pre-flight check reads."""

    def __init__(self, path: Path, cfg: HFIterableConfig, reader: Reader | None = None) -> None:
        folder = Path(path) / "data" if (Path(path) / "data").is_dir() else Path(path)
        saved = hf_datasets.load_from_disk(str(folder))
        stream = saved.to_iterable_dataset(num_shards=cfg.num_shards)
        if cfg.shuffle_buffer > 0:
            stream = stream.shuffle(seed=cfg.seed, buffer_size=cfg.shuffle_buffer)
        self.stream = stream
        self.num_shards = int(stream.num_shards)
        self.seq_len = cfg.seq_len
        self.vocab_size = cfg.vocab_size
        self.reader = reader or Reader()

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        stream = self.stream
        rank, world = node()
        if world > 1:
            stream = hf_distributed.split_dataset_by_node(stream, rank=rank, world_size=world)
        row_bytes = TOKEN_BYTES * (self.seq_len + 1)
        for row in stream:
            self.reader.charge(row_bytes)
            window = torch.tensor(row["input_ids"], dtype=torch.int64)
            yield window[:-1], window[1:]
