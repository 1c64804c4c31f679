"""JPEG images in WebDataset tar shards, streamed with the ``webdataset`` package.

The layout of large vision and multimodal training sets: samples grouped by key in tar files
(``000001.jpg``, ``000001.cls``), read front to back, one shard at a time. The shard list is
split by node (``webdataset.split_by_node``: rank and world from ``torch.distributed``) and
by worker (``split_by_worker``), so each reader streams whole shards; samples are grouped
(``group_by_keys``), optionally shuffled in a buffer of ``shuffle_buffer`` samples per worker
(held in that worker's memory, which the process-tree memory counts), decoded to uint8 CHW
tensors (``decode("torchrgb8")``) and returned as ``(image, label)``.

Each shard is read whole through the trial's storage reader, so a throttled device charges
its per-file latency and bandwidth and ``cold``/``memory`` apply to the tar files. Needs the
``streaming`` extra (``pip install 'loadertune[streaming]'``); imported only when used.
"""

from __future__ import annotations

import io
import random
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from torch.utils.data import IterableDataset, get_worker_info

from loadertune._lazy import wds
from loadertune.config import WebDatasetConfig
from loadertune.datasets._cache import digest, ensure_generated
from loadertune.storage import Reader

SHUFFLE_INITIAL = 0.1  # share of the buffer filled before the first sample leaves it


def cache_key(cfg: WebDatasetConfig) -> str:
    """A folder name that changes whenever a generator knob changes."""
    knobs = {k: v for k, v in asdict(cfg).items() if k in GENERATOR_KNOBS}
    return f"webdataset-{cfg.count}x{cfg.image_size}-{cfg.shards}sh-{digest(knobs)}"


GENERATOR_KNOBS = ("count", "shards", "image_size", "quality", "num_classes", "seed")


def ensure_tar_shards(cfg: WebDatasetConfig, cache_dir: Path) -> Path:
    """The generated shards' folder, written once (under ``paths.dataset_cache``)."""
    meta = {k: v for k, v in asdict(cfg).items() if k in GENERATOR_KNOBS}
    return ensure_generated(cache_dir, cache_key(cfg), meta, lambda d: _write(cfg, d))


def _write(cfg: WebDatasetConfig, out: Path) -> None:
    rng = np.random.default_rng(cfg.seed)
    per_shard = -(-cfg.count // cfg.shards)
    for shard in range(cfg.shards):
        with wds.TarWriter(str(out / f"shard-{shard:05d}.tar")) as sink:
            for index in range(shard * per_shard, min(cfg.count, (shard + 1) * per_shard)):
                coarse = rng.integers(0, 256, size=(4, 4, 3), dtype=np.uint8)
                size = (cfg.image_size, cfg.image_size)
                field = np.asarray(Image.fromarray(coarse).resize(size), dtype=np.int16)
                noise = rng.integers(-12, 13, size=field.shape, dtype=np.int16)
                pixels = np.clip(field + noise, 0, 255).astype(np.uint8)
                jpeg = io.BytesIO()
                Image.fromarray(pixels).save(jpeg, format="JPEG", quality=cfg.quality)
                label = str(index % cfg.num_classes).encode()
                sink.write({"__key__": f"{index:08d}", "jpg": jpeg.getvalue(), "cls": label})


class TarShards(IterableDataset[tuple[Any, int]]):
    """``(uint8 CHW image, label)`` samples streamed from ``urls``, shards split by node and
    worker. ``n_shards`` is the shard count the pre-flight check reads."""

    def __init__(
        self,
        urls: list[str],
        num_classes: int,
        shuffle_buffer: int = 0,
        seed: int = 0,
        reader: Reader | None = None,
    ) -> None:
        self.urls = list(urls)
        self.n_shards = len(self.urls)
        self.num_classes = num_classes
        self.shuffle_buffer = shuffle_buffer
        self.seed = seed
        self.reader = reader or Reader()

    @classmethod
    def from_folder(
        cls, root: Path, cfg: WebDatasetConfig, reader: Reader | None = None
    ) -> TarShards:
        """Every ``*.tar`` under ``root``, sorted."""
        urls = sorted(str(p) for p in Path(root).glob("*.tar"))
        return cls(urls, cfg.num_classes, cfg.shuffle_buffer, cfg.seed, reader)

    def _streams(self, urls: Iterator[str]) -> Iterator[dict[str, Any]]:
        for url in urls:
            yield {"url": url, "stream": io.BytesIO(self.reader.read_file(url))}

    def __iter__(self) -> Iterator[tuple[Any, int]]:
        urls = wds.split_by_worker(wds.split_by_node(iter(self.urls)))
        samples: Iterator[dict[str, Any]] = wds.tariterators.group_by_keys(
            wds.tariterators.tar_file_expander(self._streams(urls))
        )
        if self.shuffle_buffer > 0:
            info = get_worker_info()
            rng = random.Random(self.seed + (info.id if info is not None else 0))
            initial = max(1, int(SHUFFLE_INITIAL * self.shuffle_buffer))
            samples = wds.shuffle(self.shuffle_buffer, initial=initial, rng=rng)(samples)
        decoded = wds.decode("torchrgb8")(samples)
        for image, label in wds.to_tuple("jpg", "cls")(decoded):
            yield image, int(label)
