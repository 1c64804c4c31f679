"""The typed configuration: Hydra's config converted once into dataclasses, PyTorch's
DataLoader rules, and the dotted paths a config names.

Rooms (the names other packages use are re-exported below, each room imported on the first
use of one of its names, so importing the package imports none of them):

- ``_schema``: a config node merged into its dataclass schema, or one line naming the key and the
  fix.
- ``_search_rules``: which loader settings matter for a trial, and when two trials measure the same
  thing.
- ``_streaming``: the schema of the streaming datasets' groups (``conf/dataset/webdataset.yaml``,
  ``hf_iterable.yaml``): iterable datasets read shard by shard, each worker its own shards.
- ``_targets``: import a user's class or callable by its dotted path, or say in one line why it
  cannot be.
- ``_torch_rules``: PyTorch's own DataLoader rules, written once: what needs workers, and its
  defaults.
- ``_typed``: typed configuration for one trial, converted once from Hydra's config at the
  boundary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadertune._lazy import lazy_package

__all__ = [
    "DATASETS",
    "DEFAULT_PREFETCH_FACTOR",
    "MODELS",
    "NEEDS_WORKERS",
    "START_METHODS",
    "STORAGES",
    "AnyStorageConfig",
    "ArrayShardsConfig",
    "ColdStorageConfig",
    "CustomDatasetConfig",
    "CustomModelConfig",
    "DatasetConfig",
    "HFIterableConfig",
    "ImageFolderConfig",
    "LoaderConfig",
    "MLPConfig",
    "MemoryStorageConfig",
    "ModelConfig",
    "PathsConfig",
    "ResNet18Config",
    "RunConfig",
    "SimulatedModelConfig",
    "SmallCNNConfig",
    "StorageConfig",
    "SyntheticImagesConfig",
    "ThrottledStorageConfig",
    "TokensConfig",
    "TrackingConfig",
    "TransformerConfig",
    "TrialConfig",
    "WebDatasetConfig",
    "applies",
    "check_finite",
    "effective_key",
    "import_target",
    "in_flight",
    "plain_key",
    "prefetch_factor_of",
    "resolve",
    "resolve_path",
    "structured",
    "suggestion_order",
    "to_run_config",
    "workers_of",
]

if TYPE_CHECKING:
    from loadertune.config._schema import check_finite, structured
    from loadertune.config._search_rules import (
        NEEDS_WORKERS,
        applies,
        effective_key,
        plain_key,
        suggestion_order,
        workers_of,
    )
    from loadertune.config._streaming import HFIterableConfig, WebDatasetConfig
    from loadertune.config._targets import import_target, resolve
    from loadertune.config._torch_rules import (
        DEFAULT_PREFETCH_FACTOR,
        in_flight,
        prefetch_factor_of,
    )
    from loadertune.config._typed import (
        DATASETS,
        MODELS,
        START_METHODS,
        STORAGES,
        AnyStorageConfig,
        ArrayShardsConfig,
        ColdStorageConfig,
        CustomDatasetConfig,
        CustomModelConfig,
        DatasetConfig,
        ImageFolderConfig,
        LoaderConfig,
        MemoryStorageConfig,
        MLPConfig,
        ModelConfig,
        PathsConfig,
        ResNet18Config,
        RunConfig,
        SimulatedModelConfig,
        SmallCNNConfig,
        StorageConfig,
        SyntheticImagesConfig,
        ThrottledStorageConfig,
        TokensConfig,
        TrackingConfig,
        TransformerConfig,
        TrialConfig,
        resolve_path,
        to_run_config,
    )

__getattr__ = lazy_package(__name__, __file__)
