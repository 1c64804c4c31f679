"""The schema of the streaming datasets' groups (``conf/dataset/webdataset.yaml``,
``hf_iterable.yaml``): iterable datasets read shard by shard, each worker its own shards."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class WebDatasetConfig:
    """JPEG images and labels in tar shards, streamed with the ``webdataset`` package."""

    name: str = "webdataset"
    root: str | None = None
    count: int = 4096
    shards: int = 8
    image_size: int = 64
    quality: int = 90
    num_classes: int = 10
    shuffle_buffer: int = 0
    seed: int = 0


@dataclass
class HFIterableConfig:
    """Token sequences in a Hugging Face ``datasets`` dataset on disk, read in iterable mode."""

    name: str = "hf_iterable"
    path: str | None = None
    count: int = 8192
    seq_len: int = 128
    vocab_size: int = 50257
    num_shards: int = 8
    shuffle_buffer: int = 0
    seed: int = 0
