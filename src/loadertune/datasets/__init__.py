"""Datasets a trial can read: generated images, shards or tokens, a user's folder or class.

Every dataset is picklable (spawn and forkserver workers get a copy) and small per worker:
paths and offsets in numpy arrays, files opened lazily in each process. Most are map-style;
``webdataset`` and ``hf_iterable`` (and a user's own ``IterableDataset``) stream shards,
each worker its own (:mod:`.iterable`, :mod:`loadertune.checks._shards`). Built-in
datasets place their files on the trial's storage and read through its reader, so the same
dataset runs on ``local``, ``cold``, ``memory`` or a throttled device unchanged.

Rooms beside the datasets: ``_build`` (the dataset a config names, on its storage), ``_cache``
(generated datasets made once per set of knobs, cached on disk) and ``_checks`` (range checks
on dataset knobs, before anything is generated). Every name here is imported on its first
use, so checking a config never imports a dataset's libraries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadertune._lazy import lazy_package

__all__ = [
    "ArrayShardsDataset",
    "HFTokenStream",
    "ImageFolderDataset",
    "TarShards",
    "TokenDataset",
    "WorkerTally",
    "build_dataset",
    "check_dataset",
    "ensure_array_shards",
    "ensure_hf_dataset",
    "ensure_synthetic_images",
    "ensure_tar_shards",
    "ensure_tokens",
    "first_items",
    "is_iterable",
    "stream_figures",
    "unwrapped",
]

if TYPE_CHECKING:
    from loadertune.datasets._build import build_dataset
    from loadertune.datasets._checks import check_dataset
    from loadertune.datasets.array_shards import ArrayShardsDataset, ensure_array_shards
    from loadertune.datasets.hf_iterable import HFTokenStream, ensure_hf_dataset
    from loadertune.datasets.image_folder import ImageFolderDataset
    from loadertune.datasets.iterable import (
        WorkerTally,
        first_items,
        is_iterable,
        stream_figures,
        unwrapped,
    )
    from loadertune.datasets.synthetic import ensure_synthetic_images
    from loadertune.datasets.tar_shards import TarShards, ensure_tar_shards
    from loadertune.datasets.tokens import TokenDataset, ensure_tokens

__getattr__ = lazy_package(__name__, __file__)
