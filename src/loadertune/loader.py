"""The one place that builds a ``torch.utils.data.DataLoader``.

Trials and a user's own training code build their loaders here, so a tuned config means the
same thing in both. PyTorch's rules are applied rather than left to fail late: no
``prefetch_factor``, ``persistent_workers`` or ``multiprocessing_context`` without workers, and
``pin_memory`` only where there is an accelerator to pin for (elsewhere it only warns).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from loadertune import torch_rules
from loadertune.config import LoaderConfig
from loadertune.validation import validate_loader

if TYPE_CHECKING:
    import torch
    from torch.utils.data import DataLoader, Dataset

ALWAYS = ("batch_size", "num_workers", "pin_memory", "shuffle", "drop_last")
"""``DataLoader`` arguments passed with or without workers (``non_blocking`` is for the copy)."""


def loader_config(cfg: LoaderConfig | Mapping[str, Any]) -> LoaderConfig:
    """Accept a :class:`LoaderConfig`, a dict, or an OmegaConf node (e.g. ``best_loader.yaml``)."""
    if isinstance(cfg, LoaderConfig):
        return cfg
    from loadertune.config import _structured

    return _structured("loader", LoaderConfig, dict(cfg))  # type: ignore[no-any-return]


def accelerator_available(device: torch.device | str | None = None) -> bool:
    """True when batches will be copied to an accelerator that pinned memory speeds up."""
    import torch

    if device is None:
        return torch.cuda.is_available()
    return torch.device(device).type in ("cuda", "xpu")


def effective_settings(
    cfg: LoaderConfig | Mapping[str, Any], device: torch.device | str | None = None
) -> LoaderConfig:
    """The settings that actually take effect: a no-op ``pin_memory`` is recorded as off."""
    loader = loader_config(cfg)
    validate_loader(loader)
    pin = loader.pin_memory and accelerator_available(device)
    return dataclasses.replace(loader, pin_memory=pin, non_blocking=loader.non_blocking and pin)


def dataloader_kwargs(loader: LoaderConfig) -> dict[str, Any]:
    """Keyword arguments for ``DataLoader``, leaving out what PyTorch forbids without workers."""
    settings = dataclasses.asdict(loader)
    kwargs = {key: settings[key] for key in ALWAYS}
    if loader.num_workers > 0:
        kwargs |= {
            key: value
            for key, value in settings.items()
            if torch_rules.needs_workers(key) and value is not None
        }
    return kwargs


def build_dataloader(
    dataset: Dataset[Any],
    loader_cfg: LoaderConfig | Mapping[str, Any],
    device: torch.device | str | None = None,
    **extra: Any,
) -> DataLoader[Any]:
    """Build the DataLoader that ``loader_cfg`` describes, the way loadertune measured it.

    Args:
        dataset: any map-style dataset.
        loader_cfg: a :class:`LoaderConfig`, a dict or an OmegaConf node with its keys
            (``loadertune``'s ``best_loader.yaml`` loads with ``OmegaConf.load``).
        device: where batches go; ``pin_memory`` is applied only for an accelerator.
            ``None`` means CUDA if available.
        **extra: passed to ``DataLoader`` unchanged (``collate_fn``, ``sampler``, ``generator``...).

    Raises:
        ConfigError: for settings PyTorch would reject, naming the key and the fix.
    """
    from torch.utils.data import DataLoader

    kwargs = dataloader_kwargs(effective_settings(loader_cfg, device))
    if "sampler" in extra or "batch_sampler" in extra:
        kwargs.pop("shuffle")
    if "batch_sampler" in extra:
        for key in ("batch_size", "drop_last"):
            kwargs.pop(key)
    kwargs.update(extra)
    return DataLoader(dataset, **kwargs)
