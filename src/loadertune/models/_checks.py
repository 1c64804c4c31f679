"""A model's knobs range-checked, and the model against the dataset's samples, before
anything is built (no PyTorch imported)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadertune.config import (
    CustomModelConfig,
    MLPConfig,
    ModelConfig,
    ResNet18Config,
    SimulatedModelConfig,
    SmallCNNConfig,
    TransformerConfig,
)
from loadertune.errors import ConfigError
from loadertune.models._pairs import check_pair, samples_of

if TYPE_CHECKING:
    from loadertune.config import RunConfig


def check_workload(config: RunConfig) -> None:
    """Check the model's knobs, and that it can train on what the dataset yields."""
    check_model(config.model)
    samples = samples_of(config.dataset)
    if samples is not None:
        check_pair(config.model, samples, config.dataset.name)


def check_model(cfg: ModelConfig) -> None:
    """Reject model knobs out of their documented range."""
    if isinstance(cfg, SimulatedModelConfig):
        if cfg.step_ms < 0:
            raise ConfigError("model.step_ms", cfg.step_ms, "must be >= 0", "e.g. model.step_ms=20")
        return
    if isinstance(cfg, CustomModelConfig):
        return  # the factory is checked with the user's code (loadertune.checks._user_code)
    if not cfg.lr > 0:
        raise ConfigError("model.lr", cfg.lr, "must be > 0", "e.g. model.lr=0.01")
    if isinstance(cfg, MLPConfig):
        _at_least("model.hidden", cfg.hidden, 1, "256")
        _at_least("model.layers", cfg.layers, 0, "2")
    elif isinstance(cfg, SmallCNNConfig):
        _at_least("model.channels", cfg.channels, 1, "16")
    elif isinstance(cfg, ResNet18Config):
        _at_least("model.width", cfg.width, 1, "64")
        if cfg.stem not in ("auto", "imagenet", "cifar"):
            raise ConfigError(
                "model.stem", cfg.stem, "is not a stem", "use auto, imagenet or cifar"
            )
    elif isinstance(cfg, TransformerConfig):
        _at_least("model.layers", cfg.layers, 1, "4")
        _at_least("model.heads", cfg.heads, 1, "4")
        _at_least("model.mlp_ratio", cfg.mlp_ratio, 1, "4")
        if cfg.d_model < 1 or cfg.d_model % cfg.heads:
            raise ConfigError(
                "model.d_model",
                cfg.d_model,
                f"must be a positive multiple of model.heads={cfg.heads}",
                f"e.g. model.d_model={64 * cfg.heads}",
            )
        if cfg.vocab_size is not None and cfg.vocab_size < 2:
            raise ConfigError(
                "model.vocab_size",
                cfg.vocab_size,
                "must be >= 2",
                "e.g. model.vocab_size=null to take the dataset's",
            )


def _at_least(key: str, value: int, low: int, example: str) -> None:
    if value < low:
        raise ConfigError(key, value, f"must be >= {low}", f"e.g. {key}={example}")
