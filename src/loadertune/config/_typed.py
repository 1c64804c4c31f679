"""Typed configuration for one trial, converted once from Hydra's config at the boundary.

The YAML files in ``conf/`` are plain; these dataclasses are their schema. The entry point
converts the composed config with :func:`to_run_config`, which turns every type error, unknown
key and missing value into a :class:`~loadertune.errors.ConfigError` naming the full key, so a
person sees one line instead of a traceback. Inside the package only these objects travel.

One default per key: the YAML, with its comments, is the source of truth users read, and each
default here equals it (the presets ``storage=hdd|nfs|object_store`` aside, their own values of
the throttled schema); ``tests/config/test_defaults.py`` composes both and compares them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from loadertune.config._schema import structured
from loadertune.config._streaming import HFIterableConfig as HFIterableConfig
from loadertune.config._streaming import WebDatasetConfig as WebDatasetConfig
from loadertune.errors import ConfigError

START_METHODS = ("fork", "spawn", "forkserver")


@dataclass
class LoaderConfig:
    """The DataLoader settings under test; the same keys a training script passes on."""

    batch_size: int | None = 32
    num_workers: int = 0
    pin_memory: bool = False
    prefetch_factor: int | None = None
    persistent_workers: bool = False
    multiprocessing_context: str | None = None
    shuffle: bool = True
    drop_last: bool = True
    non_blocking: bool = True
    collate_fn: str | None = None  # dotted path of a callable; None: PyTorch's default collate
    worker_init_fn: str | None = None  # dotted path of a callable(worker_id); None: none


@dataclass
class TrialConfig:
    """How one configuration is measured (``conf/trial/default.yaml`` says each key's range).

    ``steps`` timed steps at least, ``max_steps`` at most (None: 3 x ``steps``): in between,
    timing stops once the time per sample is known within ``precision`` (the relative
    half-width of its ~95% interval; None: exactly ``steps``).
    """

    warmup_steps: int = 5
    steps: int = 40
    max_steps: int | None = None
    precision: float | None = 0.02
    device: str = "auto"
    time_limit_s: float = 300.0
    sample_hz: float = 10.0
    seed: int = 0
    torch_threads: int | None = None
    memory_budget_mb: float | None = None  # the trial's process tree; None: 3/4 of available
    host_lock: str = "wait"
    nproc_per_node: int = 1


@dataclass
class TrackingConfig:
    """Where the MLflow record goes."""

    enabled: bool = True
    tracking_uri: str | None = None
    experiment: str = "loadertune"
    run_name: str | None = None


@dataclass
class PathsConfig:
    """Where loadertune writes: run directories, databases and dataset caches."""

    output_root: str = "outputs"
    dataset_cache: str = "outputs/datasets"


@dataclass
class StorageConfig:
    """``local``: the dataset's files read where they are, page cache as the OS leaves it."""

    name: str = "local"


@dataclass
class ColdStorageConfig:
    """``cold``: the dataset's files evicted from the page cache before each trial."""

    name: str = "cold"


@dataclass
class MemoryStorageConfig:
    """``memory``: the dataset copied to a RAM file system for the trial, removed after."""

    name: str = "memory"
    dir: str = "/dev/shm"


@dataclass
class ThrottledStorageConfig:
    """A simulated slow device (``throttled``, ``hdd``, ``nfs``): per-read latency and a
    bandwidth shared by every process that reads, with ``queue_depth`` reads in service, and
    about one read in ``stall_every`` (0: none) held ``stall_ms`` longer: a heavy tail."""

    name: str = "throttled"
    latency_ms: float = 10.0
    bandwidth_mb_s: float = 160.0
    queue_depth: int = 1
    stall_every: int = 0
    stall_ms: float = 0.0


AnyStorageConfig = StorageConfig | ColdStorageConfig | MemoryStorageConfig | ThrottledStorageConfig


@dataclass
class SyntheticImagesConfig:
    """A generated ImageFolder of JPEG files, cached under ``paths.dataset_cache``."""

    name: str = "synthetic_images"
    count: int = 2048
    image_size: int = 128
    crop_size: int = 112
    quality: int = 90
    num_classes: int = 10
    seed: int = 0
    size_jitter: float = 0.0
    format: str = "jpeg"


@dataclass
class ImageFolderConfig:
    """A user's own folder of JPEG/PNG images in ImageFolder layout (``root/<class>/<file>``)."""

    name: str = "image_folder"
    root: str = MISSING
    crop_size: int = 224


@dataclass
class CustomDatasetConfig:
    """A user's own ``torch.utils.data.Dataset`` class, built with keyword arguments."""

    name: str = "custom"
    target: str = MISSING
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class ArrayShardsConfig:
    """Numpy ``.npy`` shards read through memory maps: I/O-heavy, decode-light samples."""

    name: str = "array_shards"
    root: str | None = None
    count: int = 8192
    sample_shape: list[int] = field(default_factory=lambda: [3, 64, 64])
    dtype: str = "uint8"
    shard_size: int = 1024
    num_classes: int = 10
    seed: int = 0


@dataclass
class TokensConfig:
    """A flat file of uint16 token ids served as fixed-length (input, next-token) sequences."""

    name: str = "tokens"
    path: str | None = None
    count: int = 4_194_304
    seq_len: int = 256
    vocab_size: int = 50257
    seed: int = 0


DatasetConfig = (
    SyntheticImagesConfig
    | ImageFolderConfig
    | ArrayShardsConfig
    | TokensConfig
    | WebDatasetConfig
    | HFIterableConfig
    | CustomDatasetConfig
)


@dataclass
class SimulatedModelConfig:
    """An accelerator step of ``step_ms`` that holds no CPU (a sleep), for planning GPU runs."""

    name: str = "simulated"
    step_ms: float = 20.0


@dataclass
class MLPConfig:
    """A multi-layer perceptron over the flattened sample, trained with SGD."""

    name: str = "mlp"
    hidden: int = 256
    layers: int = 2
    lr: float = 0.01


@dataclass
class SmallCNNConfig:
    """A small convolutional network for image samples, trained with SGD."""

    name: str = "small_cnn"
    channels: int = 16
    lr: float = 0.01


@dataclass
class ResNet18Config:
    """ResNet-18 (basic blocks 2-2-2-2) in plain PyTorch, trained with SGD."""

    name: str = "resnet18"
    width: int = 64
    stem: str = "auto"
    lr: float = 0.01


@dataclass
class TransformerConfig:
    """A decoder-only transformer language model over token sequences, trained with AdamW."""

    name: str = "transformer"
    layers: int = 4
    d_model: int = 256
    heads: int = 4
    mlp_ratio: int = 4
    vocab_size: int | None = None
    lr: float = 3e-4


@dataclass
class CustomModelConfig:
    """A user's own training step: ``target`` names a factory called with ``kwargs`` that
    returns a ``step(batch)`` callable or a ``torch.nn.Module`` (see :mod:`loadertune.models`)."""

    name: str = "custom"
    target: str = MISSING
    kwargs: dict[str, Any] = field(default_factory=dict)


ModelConfig = (
    SimulatedModelConfig
    | MLPConfig
    | SmallCNNConfig
    | ResNet18Config
    | TransformerConfig
    | CustomModelConfig
)


@dataclass
class RunConfig:
    """Everything one trial needs, typed."""

    dataset: DatasetConfig
    model: ModelConfig
    loader: LoaderConfig = field(default_factory=LoaderConfig)
    trial: TrialConfig = field(default_factory=TrialConfig)
    storage: AnyStorageConfig = field(default_factory=StorageConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    paths: PathsConfig = field(default_factory=PathsConfig)


DATASETS: dict[str, type[Any]] = {
    "synthetic_images": SyntheticImagesConfig,
    "image_folder": ImageFolderConfig,
    "array_shards": ArrayShardsConfig,
    "tokens": TokensConfig,
    "webdataset": WebDatasetConfig,
    "hf_iterable": HFIterableConfig,
    "custom": CustomDatasetConfig,
}
MODELS: dict[str, type[Any]] = {
    "simulated": SimulatedModelConfig,
    "mlp": MLPConfig,
    "small_cnn": SmallCNNConfig,
    "resnet18": ResNet18Config,
    "transformer": TransformerConfig,
    "custom": CustomModelConfig,
}
# hdd, nfs and object_store are presets of the throttled device: same schema, their own name
# on the record.
STORAGES: dict[str, type[Any]] = {
    "local": StorageConfig,
    "cold": ColdStorageConfig,
    "memory": MemoryStorageConfig,
    "throttled": ThrottledStorageConfig,
    "hdd": ThrottledStorageConfig,
    "nfs": ThrottledStorageConfig,
    "object_store": ThrottledStorageConfig,
}


def to_run_config(cfg: DictConfig | Mapping[str, Any]) -> RunConfig:
    """Convert a composed config (Hydra's, or a plain mapping) into a typed :class:`RunConfig`.

    Raises:
        ConfigError: naming the full key of the first value that does not fit its schema.
    """
    raw = cfg if isinstance(cfg, DictConfig) else OmegaConf.create(dict(cfg))
    try:
        top = {k: raw[k] for k in raw if k != "hydra"}  # hydra: resolves only in a running job
        node = OmegaConf.create(OmegaConf.to_container(OmegaConf.create(top), resolve=True))
        assert isinstance(node, DictConfig)
        node.get("loader", {}).pop("nproc_per_node", None)  # best_loader.yaml's: settings per rank
    except OmegaConfBaseException as exc:
        key = str(getattr(exc, "full_key", None) or "config")
        problem = str(exc).splitlines()[0].rstrip(".")
        raise ConfigError(key, None, problem, "fix the interpolation or set a value") from None
    groups = ("dataset", "model", "storage")
    sections: dict[str, Any] = {k: node.get(k) for k in groups}
    for group in groups:
        if sections[group] is None:
            raise ConfigError(group, None, "is missing", f"choose one, e.g. {group}=<name>")
    dataset = _dataset_config(sections["dataset"])
    model = _model_config(sections["model"])
    storage = _variant("storage", sections["storage"], STORAGES)
    simple = {
        "loader": LoaderConfig,
        "trial": TrialConfig,
        "tracking": TrackingConfig,
        "paths": PathsConfig,
    }
    parts = {k: structured(k, schema, node.get(k, {})) for k, schema in simple.items()}
    return RunConfig(dataset=dataset, model=model, storage=storage, **parts)


def _variant(group: str, node: Any, options: Mapping[str, type[Any]]) -> Any:
    name = node.get("name") if isinstance(node, DictConfig) else None
    if not isinstance(name, str) or name not in options:
        known = ", ".join(sorted(options))
        raise ConfigError(f"{group}.name", name, f"is not a known {group}", f"use one of {known}")
    return structured(group, options[name], node)


def _dataset_config(node: Any) -> DatasetConfig:
    if isinstance(node, DictConfig) and node.get("name") == "custom":
        target, kwargs = _target_and_kwargs(
            "dataset", node, "name your Dataset class, e.g. dataset._target_=my_pkg.data.MyDataset"
        )
        return CustomDatasetConfig(target=target, kwargs=kwargs)
    result: DatasetConfig = _variant("dataset", node, DATASETS)
    return result


def _model_config(node: Any) -> ModelConfig:
    if isinstance(node, DictConfig) and node.get("name") == "custom":
        target, kwargs = _target_and_kwargs(
            "model", node, "name your step factory, e.g. model._target_=my_pkg.train.make_step"
        )
        return CustomModelConfig(target=target, kwargs=kwargs)
    result: ModelConfig = _variant("model", node, MODELS)
    return result


def _target_and_kwargs(group: str, node: DictConfig, fix: str) -> tuple[str, dict[str, Any]]:
    """A ``custom`` group's ``_target_`` and the other keys (``+group.k=v``) as keyword args."""
    container = OmegaConf.to_container(node, resolve=True)
    assert isinstance(container, dict)
    target = container.pop("_target_", None)
    container.pop("name", None)
    if not isinstance(target, str) or target in ("", "???"):
        raise ConfigError(f"{group}._target_", target, "is not set", fix)
    return target, {str(k): v for k, v in container.items()}


def resolve_path(path: str) -> Path:
    """An absolute path: Hydra may change the working directory per job."""
    return Path(path).expanduser().resolve()
