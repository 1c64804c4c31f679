"""Range checks on dataset knobs, run before anything is generated or read.

Each failure names the key and a fix, like the loader checks in
:mod:`loadertune.checks._validation`.
"""

from __future__ import annotations

from pathlib import Path

from loadertune.config import (
    ArrayShardsConfig,
    DatasetConfig,
    HFIterableConfig,
    ImageFolderConfig,
    SyntheticImagesConfig,
    TokensConfig,
    WebDatasetConfig,
)
from loadertune.errors import ConfigError

_DTYPES = ("uint8", "int16", "int32", "float16", "float32")
_FORMATS = ("jpeg", "png")
_MAX_UINT16_VOCAB = 65536


def check_dataset(ds: DatasetConfig) -> None:
    """Reject dataset knobs out of their documented range."""
    if isinstance(ds, SyntheticImagesConfig):
        _synthetic(ds)
    elif isinstance(ds, ImageFolderConfig):
        _at_least("dataset.crop_size", ds.crop_size, 1, "224")
    elif isinstance(ds, ArrayShardsConfig):
        _shards(ds)
    elif isinstance(ds, TokensConfig):
        _tokens(ds)
    elif isinstance(ds, WebDatasetConfig):
        _webdataset(ds)
    elif isinstance(ds, HFIterableConfig):
        _hf_iterable(ds)


def _shard_folder(root: str, suffix: str, what: str, generated: str) -> None:
    """``dataset.root`` must be a folder holding ``*<suffix>`` shards."""
    folder = Path(root).expanduser()
    if not folder.is_dir() or not any(folder.glob(f"*{suffix}")):
        raise ConfigError(
            "dataset.root",
            root,
            f"is not a folder of {suffix} shards",
            f"point it at a folder of {what}, or set dataset.root=null to generate {generated}",
        )


def _webdataset(ds: WebDatasetConfig) -> None:
    _at_least("dataset.shuffle_buffer", ds.shuffle_buffer, 0, "1000")
    if ds.root is not None:
        _shard_folder(
            ds.root, ".tar", "WebDataset shards (<key>.jpg and <key>.cls in each)", "them"
        )
        return
    _at_least("dataset.count", ds.count, 1, "4096")
    _at_least("dataset.shards", ds.shards, 1, "8")
    _at_least("dataset.image_size", ds.image_size, 8, "64")
    _at_least("dataset.num_classes", ds.num_classes, 1, "10")
    _shards_within("dataset.shards", ds.shards, ds.count, "samples (some would be empty)")
    if not 1 <= ds.quality <= 95:
        raise ConfigError("dataset.quality", ds.quality, "must be in 1..95", "e.g. 90")


def _hf_iterable(ds: HFIterableConfig) -> None:
    _at_least("dataset.num_shards", ds.num_shards, 1, "8")
    _at_least("dataset.shuffle_buffer", ds.shuffle_buffer, 0, "1000")
    _at_least("dataset.seq_len", ds.seq_len, 1, "128")
    if ds.path is not None:
        if not Path(ds.path).expanduser().is_dir():
            raise ConfigError(
                "dataset.path",
                ds.path,
                "is not a folder",
                "point it at a folder written by datasets.Dataset.save_to_disk, "
                "or set dataset.path=null to generate one",
            )
        return
    _at_least("dataset.count", ds.count, 1, "8192")
    _shards_within("dataset.num_shards", ds.num_shards, ds.count, "rows")
    if not 2 <= ds.vocab_size <= 2**31:
        raise ConfigError("dataset.vocab_size", ds.vocab_size, "must be in 2..2**31", "e.g. 50257")


def _synthetic(ds: SyntheticImagesConfig) -> None:
    _at_least("dataset.count", ds.count, 1, "2048")
    _at_least("dataset.image_size", ds.image_size, 8, "128")
    _at_least("dataset.crop_size", ds.crop_size, 1, "112")
    _at_least("dataset.num_classes", ds.num_classes, 1, "10")
    if not 1 <= ds.quality <= 95:
        raise ConfigError("dataset.quality", ds.quality, "must be in 1..95", "e.g. 90")
    if not 0 <= ds.size_jitter <= 0.9:
        raise ConfigError(
            "dataset.size_jitter",
            ds.size_jitter,
            "must be in [0, 0.9] (fraction each side varies by)",
            "e.g. dataset.size_jitter=0.25",
        )
    if ds.format not in _FORMATS:
        raise ConfigError(
            "dataset.format", ds.format, "is not a format", f"use one of {', '.join(_FORMATS)}"
        )


def _shards(ds: ArrayShardsConfig) -> None:
    if ds.root is not None:
        _shard_folder(ds.root, ".npy", "<name>.npy files (first axis = samples)", "shards")
        return
    _at_least("dataset.count", ds.count, 1, "8192")
    _at_least("dataset.shard_size", ds.shard_size, 1, "1024")
    _at_least("dataset.num_classes", ds.num_classes, 1, "10")
    if not ds.sample_shape or any(d < 1 for d in ds.sample_shape):
        raise ConfigError(
            "dataset.sample_shape",
            ds.sample_shape,
            "must be a non-empty list of sizes >= 1",
            "e.g. dataset.sample_shape=[3,64,64]",
        )
    if ds.dtype not in _DTYPES:
        raise ConfigError(
            "dataset.dtype",
            ds.dtype,
            "is not a supported dtype",
            f"use one of {', '.join(_DTYPES)}",
        )


def _tokens(ds: TokensConfig) -> None:
    _at_least("dataset.seq_len", ds.seq_len, 1, "256")
    if not 2 <= ds.vocab_size <= _MAX_UINT16_VOCAB:
        raise ConfigError(
            "dataset.vocab_size",
            ds.vocab_size,
            f"must be in 2..{_MAX_UINT16_VOCAB} (ids are stored as uint16)",
            "e.g. dataset.vocab_size=50257 (GPT-2's tokenizer)",
        )
    if ds.path is not None:
        path = Path(ds.path).expanduser()
        if not path.is_file():
            raise ConfigError(
                "dataset.path",
                ds.path,
                "is not an existing file",
                "point it at a flat uint16 token file (nanoGPT's train.bin), "
                "or set dataset.path=null to generate one",
            )
        if path.stat().st_size < 2 * (ds.seq_len + 1):
            raise ConfigError(
                "dataset.seq_len",
                ds.seq_len,
                f"needs seq_len + 1 tokens but {ds.path} holds fewer",
                "lower dataset.seq_len or use a larger token file",
            )
        return
    if ds.count < ds.seq_len + 1:
        raise ConfigError(
            "dataset.count",
            ds.count,
            f"must be at least dataset.seq_len + 1 = {ds.seq_len + 1} tokens",
            "raise dataset.count or lower dataset.seq_len",
        )


def _at_least(key: str, value: int, low: int, example: str) -> None:
    if value < low:
        raise ConfigError(key, value, f"must be >= {low}", f"e.g. {key}={example}")


def _shards_within(key: str, shards: int, count: int, of: str) -> None:
    """A generated dataset cannot have more shards than items: ``key`` names the count."""
    if shards > count:
        raise ConfigError(
            key, shards, f"is more shards than dataset.count={count} {of}", f"use {key}<={count}"
        )
