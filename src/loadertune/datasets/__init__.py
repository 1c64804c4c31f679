"""Datasets a trial can read: generated images, shards or tokens, a user's folder or class.

Every dataset is picklable (spawn and forkserver workers get a copy) and small per worker:
paths and offsets in numpy arrays, files opened lazily in each process. Most are map-style;
``webdataset`` and ``hf_iterable`` (and a user's own ``IterableDataset``) stream shards,
each worker its own (:mod:`.iterable`, :mod:`loadertune.checks._shards`). Built-in
datasets place their files on the trial's storage and read through its reader, so the same
dataset runs on ``local``, ``cold``, ``memory`` or a throttled device unchanged.

Rooms beside the datasets: ``_cache`` (generated datasets made once per set of knobs, cached
on disk) and ``_checks`` (range checks on dataset knobs, before anything is generated).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
from loadertune.datasets._checks import check_dataset
from loadertune.errors import ConfigError

if TYPE_CHECKING:
    from loadertune.storage import StorageSession

__all__ = ["build_dataset", "check_dataset"]


def build_dataset(config: RunConfig, storage: StorageSession | None = None) -> Any:
    """Build the dataset ``config.dataset`` names, placed on ``storage`` (plain files if None)."""
    from loadertune.storage import StorageSession

    store = storage or StorageSession(config.storage)
    ds = config.dataset
    cache = resolve_path(config.paths.dataset_cache)
    if isinstance(ds, SyntheticImagesConfig | ImageFolderConfig):
        from loadertune.datasets.image_folder import ImageFolderDataset

        if isinstance(ds, SyntheticImagesConfig):
            from loadertune.datasets.synthetic import ensure_synthetic_images

            root = ensure_synthetic_images(ds, cache)
        else:
            root = resolve_path(ds.root)
        return ImageFolderDataset(store.place(root), ds.crop_size, store.reader)
    if isinstance(ds, ArrayShardsConfig):
        from loadertune.datasets.array_shards import ArrayShardsDataset, ensure_array_shards

        root = resolve_path(ds.root) if ds.root else ensure_array_shards(ds, cache)
        return ArrayShardsDataset(store.place(root), store.reader)
    if isinstance(ds, TokensConfig):
        from loadertune.datasets.tokens import TokenDataset, ensure_tokens

        path = resolve_path(ds.path) if ds.path else ensure_tokens(ds, cache)
        return TokenDataset(store.place(path), ds.seq_len, ds.vocab_size, store.reader)
    if isinstance(ds, WebDatasetConfig):
        from loadertune.datasets.tar_shards import TarShards, ensure_tar_shards

        root = resolve_path(ds.root) if ds.root else ensure_tar_shards(ds, cache)
        return TarShards.from_folder(store.place(root), ds, store.reader)
    if isinstance(ds, HFIterableConfig):
        from loadertune.datasets.hf_iterable import HFTokenStream, ensure_hf_dataset

        path = resolve_path(ds.path) if ds.path else ensure_hf_dataset(ds, cache)
        return HFTokenStream(store.place(path), ds, store.reader)
    if isinstance(ds, CustomDatasetConfig):
        return _usable(import_target(ds.target)(**ds.kwargs), ds.target)
    raise TypeError(f"unknown dataset config {type(ds).__name__}")


def _usable(dataset: Any, target: str) -> Any:
    """The object ``dataset._target_`` returned, if a DataLoader can stream it (an
    ``IterableDataset``) or index it and count it (map-style)."""
    from loadertune.datasets.iterable import is_iterable

    if is_iterable(dataset):
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
