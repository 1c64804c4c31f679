"""Which loader settings matter for a trial, and when two trials measure the same thing.

A sweep should not spend trials on settings that change nothing: ``prefetch_factor``,
``persistent_workers`` and ``multiprocessing_context`` only exist with workers, and
``pin_memory``/``non_blocking`` only act on an accelerator. The sweeper asks these rules
before suggesting a parameter, and answers a trial whose *effective* settings equal an
earlier trial's from that measurement.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, replace
from typing import Any

from loadertune.config import _torch_rules as torch_rules
from loadertune.config._typed import RunConfig

NEEDS_WORKERS = frozenset(f"loader.{name}" for name in torch_rules.NEEDS_WORKERS)
NEEDS_ACCELERATOR = frozenset({"loader.pin_memory", "loader.non_blocking"})


def plain_key(key: str) -> str:
    """``+loader.x`` / ``++loader.x`` -> ``loader.x``."""
    return key.lstrip("+")


def workers_of(values: Mapping[str, Any], default: int | None = None) -> int | None:
    """``loader.num_workers`` from a trial's params or overrides (keys may carry ``+``)."""
    for key, value in values.items():
        if plain_key(key) == "loader.num_workers":
            return int(value)
    return default


def applies(key: str, num_workers: int, accelerator: bool) -> bool:
    """Whether the setting ``key`` can change a trial with these workers on this device."""
    name = plain_key(key)
    if name in NEEDS_WORKERS:
        return num_workers > 0
    if name in NEEDS_ACCELERATOR:
        return accelerator
    return True


def suggestion_order(keys: list[str]) -> list[str]:
    """``loader.num_workers`` first, since other settings depend on it; the rest as given."""
    return sorted(keys, key=lambda k: plain_key(k) != "loader.num_workers")


def effective_key(config: RunConfig, accelerator: bool) -> str:
    """A digest of what a trial actually measures: two equal keys measure the same thing."""
    loader = config.loader
    if loader.num_workers == 0:
        loader = replace(
            loader, prefetch_factor=None, persistent_workers=False, multiprocessing_context=None
        )
    elif loader.prefetch_factor is None:
        loader = replace(loader, prefetch_factor=torch_rules.DEFAULT_PREFETCH_FACTOR)
    if not accelerator:
        loader = replace(loader, pin_memory=False, non_blocking=False)
    measured: Mapping[str, Any] = {
        "dataset": asdict(config.dataset),
        "storage": asdict(config.storage),
        "model": asdict(config.model),
        "loader": asdict(loader),
        "trial": _trial_identity(config),
    }
    return hashlib.sha256(json.dumps(measured, sort_keys=True, default=str).encode()).hexdigest()[
        :16
    ]


def _trial_identity(config: RunConfig) -> dict[str, Any]:
    """The trial settings in :func:`effective_key`; one rank (the default) is left out, so
    keys from before ``trial.nproc_per_node`` existed still match."""
    trial = asdict(config.trial)
    if trial.get("nproc_per_node") == 1:
        del trial["nproc_per_node"]
    return trial
