"""Which model can train on which dataset's samples, decided before anything runs.

Built-in datasets say what they yield from their config alone, so an impossible pair is
refused before a dataset is generated. A custom dataset is checked on its first sample, still
before any worker starts. Either way the message names both the model and the dataset.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadertune.config import (
    ArrayShardsConfig,
    DatasetConfig,
    HFIterableConfig,
    ImageFolderConfig,
    ModelConfig,
    ResNet18Config,
    SmallCNNConfig,
    SyntheticImagesConfig,
    TokensConfig,
    TransformerConfig,
    WebDatasetConfig,
)
from loadertune.errors import ConfigError

IMAGE_MODELS = (SmallCNNConfig, ResNet18Config)


@dataclass(frozen=True)
class Samples:
    """What a dataset yields: the input's shape (without batch) and whether it is integer."""

    shape: tuple[int, ...]
    integer: bool
    what: str  # words for messages, e.g. "float32 images shaped (3, 112, 112)"


def samples_of(ds: DatasetConfig) -> Samples | None:
    """What a built-in dataset yields, from its config; None when only a sample can tell."""
    shape: tuple[int, ...]
    if isinstance(ds, SyntheticImagesConfig | ImageFolderConfig):
        shape = (3, ds.crop_size, ds.crop_size)
        return Samples(shape, False, f"float32 images shaped {shape}")
    if isinstance(ds, ArrayShardsConfig) and ds.root is None:
        shape = tuple(ds.sample_shape)
        integer = ds.dtype.startswith(("uint", "int"))
        return Samples(shape, integer, f"{ds.dtype} arrays shaped {shape}")
    if isinstance(ds, TokensConfig | HFIterableConfig):
        return Samples((ds.seq_len,), True, f"int64 token sequences shaped ({ds.seq_len},)")
    if isinstance(ds, WebDatasetConfig) and ds.root is None:
        shape = (3, ds.image_size, ds.image_size)
        return Samples(shape, True, f"uint8 images shaped {shape}")
    return None


def check_pair(model: ModelConfig, samples: Samples, dataset_name: str) -> None:
    """Refuse a model that cannot take ``samples``, naming both and what would work."""
    if isinstance(model, IMAGE_MODELS) and len(samples.shape) != 3:
        raise ConfigError(
            "model.name",
            model.name,
            f"needs image samples shaped (C, H, W) but dataset={dataset_name} yields "
            f"{samples.what}",
            "use model=mlp or model=simulated with this dataset"
            + (", or model=transformer with dataset=tokens" if samples.integer else ""),
        )
    if isinstance(model, TransformerConfig) and (len(samples.shape) != 1 or not samples.integer):
        raise ConfigError(
            "model.name",
            model.name,
            f"needs token sequences (1-D integer tensors) but dataset={dataset_name} yields "
            f"{samples.what}",
            "use dataset=tokens with model=transformer, or model=resnet18, small_cnn, mlp or "
            "simulated with this dataset",
        )
