"""The dataset a config names, built on the trial's storage: each kind's module is imported
only when it is built (the streaming ones import PyTorch), through the package's lazy names."""

from __future__ import annotations

from typing import Any

from loadertune import datasets
from loadertune.config import (
    ArrayShardsConfig,
    CustomDatasetConfig,
    HFIterableConfig,
    ImageFolderConfig,
    RunConfig,
    SyntheticImagesConfig,
    TokensConfig,
    WebDatasetConfig,
    import_target,
    resolve_path,
)
from loadertune.errors import ConfigError
from loadertune.storage import StorageSession


def build_dataset(config: RunConfig, storage: StorageSession | None = None) -> Any:
    """Build the dataset ``config.dataset`` names, placed on ``storage`` (plain files if None)."""
    store = storage or StorageSession(config.storage)
    ds = config.dataset
    cache = resolve_path(config.paths.dataset_cache)
    if isinstance(ds, SyntheticImagesConfig | ImageFolderConfig):
        if isinstance(ds, SyntheticImagesConfig):
            root = datasets.ensure_synthetic_images(ds, cache)
        else:
            root = resolve_path(ds.root)
        return datasets.ImageFolderDataset(store.place(root), ds.crop_size, store.reader)
    if isinstance(ds, ArrayShardsConfig):
        root = resolve_path(ds.root) if ds.root else datasets.ensure_array_shards(ds, cache)
        return datasets.ArrayShardsDataset(store.place(root), store.reader)
    if isinstance(ds, TokensConfig):
        path = resolve_path(ds.path) if ds.path else datasets.ensure_tokens(ds, cache)
        return datasets.TokenDataset(store.place(path), ds.seq_len, ds.vocab_size, store.reader)
    if isinstance(ds, WebDatasetConfig):
        root = resolve_path(ds.root) if ds.root else datasets.ensure_tar_shards(ds, cache)
        return datasets.TarShards.from_folder(store.place(root), ds, store.reader)
    if isinstance(ds, HFIterableConfig):
        path = resolve_path(ds.path) if ds.path else datasets.ensure_hf_dataset(ds, cache)
        return datasets.HFTokenStream(store.place(path), ds, store.reader)
    if isinstance(ds, CustomDatasetConfig):
        return _usable(import_target(ds.target)(**ds.kwargs), ds.target)
    raise TypeError(f"unknown dataset config {type(ds).__name__}")


def _usable(dataset: Any, target: str) -> Any:
    """The object ``dataset._target_`` returned, if a DataLoader can stream it (an
    ``IterableDataset``) or index it and count it (map-style)."""
    if datasets.is_iterable(dataset):
        return dataset
    kind = type(dataset).__name__
    if hasattr(dataset, "__iter__") and not hasattr(dataset, "__getitem__"):
        raise ConfigError(
            "dataset._target_",
            target,
            f"returned an instance of {kind}, an iterable that is not an IterableDataset "
            "(a DataLoader would index it)",
            "subclass torch.utils.data.IterableDataset",
        )
    if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
        raise ConfigError(
            "dataset._target_",
            target,
            f"returned an instance of {kind}, not a map-style Dataset (__getitem__ and __len__)",
            "point it at a torch.utils.data.Dataset subclass or a function returning one",
        )
    if isinstance(dataset, str | bytes | dict) or len(dataset) == 0:
        why = (
            "has no items"
            if len(dataset) == 0
            else f"returned an instance of {kind}, not a Dataset"
        )
        raise ConfigError(
            "dataset._target_", target, why, "check its arguments (+dataset.<name>=...)"
        )
    return dataset
