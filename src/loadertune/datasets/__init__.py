"""Datasets a trial can read: generated, a user's own folder, or a user's own class."""

from __future__ import annotations

from typing import Any

from loadertune.config import (
    CustomDatasetConfig,
    ImageFolderConfig,
    RunConfig,
    SyntheticImagesConfig,
    resolve_path,
)
from loadertune.storage import prepare_storage

__all__ = ["build_dataset"]


def build_dataset(config: RunConfig) -> Any:
    """Build the map-style dataset that ``config.dataset`` names, on ``config.storage``."""
    ds = config.dataset
    if isinstance(ds, SyntheticImagesConfig):
        from loadertune.datasets.image_folder import ImageFolderDataset
        from loadertune.datasets.synthetic import ensure_synthetic_images

        root = ensure_synthetic_images(ds, resolve_path(config.paths.dataset_cache))
        return ImageFolderDataset(prepare_storage(config.storage, root), ds.crop_size)
    if isinstance(ds, ImageFolderConfig):
        from loadertune.datasets.image_folder import ImageFolderDataset

        root = prepare_storage(config.storage, resolve_path(ds.root))
        return ImageFolderDataset(root, ds.crop_size)
    if isinstance(ds, CustomDatasetConfig):
        from loadertune.validation import import_target

        return import_target(ds.target)(**ds.kwargs)
    raise TypeError(f"unknown dataset config {type(ds).__name__}")
