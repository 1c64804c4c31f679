"""Checks that run before anything starts: each failure names the config key and the fix.

PyTorch itself rejects some of these only when the first iterator is created (an
``AssertionError`` deep in a worker), and accepts others silently (``pin_memory`` without an
accelerator). Checking here means a bad value costs nothing and leaves nothing half-written.
"""

from __future__ import annotations

import importlib
import multiprocessing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadertune.config import (
    START_METHODS,
    CustomDatasetConfig,
    ImageFolderConfig,
    LoaderConfig,
    RunConfig,
    TrialConfig,
)
from loadertune.errors import ConfigError


def validate_loader(loader: LoaderConfig, prefix: str = "loader") -> None:
    """Reject loader settings that PyTorch would refuse, late or never, with the fix."""
    bs = loader.batch_size
    if bs is None or isinstance(bs, bool) or not isinstance(bs, int) or bs <= 0:
        raise ConfigError(
            f"{prefix}.batch_size", bs, "must be a positive integer", f"e.g. {prefix}.batch_size=64"
        )
    nw = loader.num_workers
    if isinstance(nw, bool) or not isinstance(nw, int) or nw < 0:
        raise ConfigError(
            f"{prefix}.num_workers",
            nw,
            "must be an integer >= 0 (0 loads in the training process)",
            f"e.g. {prefix}.num_workers=2",
        )
    pf = loader.prefetch_factor
    if pf is not None:
        if isinstance(pf, bool) or not isinstance(pf, int) or pf < 1:
            raise ConfigError(
                f"{prefix}.prefetch_factor",
                pf,
                "must be an integer >= 1 (batches loaded in advance per worker)",
                f"e.g. {prefix}.prefetch_factor=2, or null for PyTorch's default",
            )
        if nw == 0:
            raise ConfigError(
                f"{prefix}.prefetch_factor",
                pf,
                f"needs {prefix}.num_workers > 0",
                f"set {prefix}.prefetch_factor=null or raise {prefix}.num_workers",
            )
    if loader.persistent_workers and nw == 0:
        raise ConfigError(
            f"{prefix}.persistent_workers",
            True,
            f"needs {prefix}.num_workers > 0",
            f"set {prefix}.persistent_workers=false or raise {prefix}.num_workers",
        )
    ctx = loader.multiprocessing_context
    if ctx is not None:
        available = [m for m in START_METHODS if m in multiprocessing.get_all_start_methods()]
        if ctx not in available:
            raise ConfigError(
                f"{prefix}.multiprocessing_context",
                ctx,
                "is not a start method this platform offers",
                f"use one of {', '.join(available)}, or null for the platform default",
            )
        if nw == 0:
            raise ConfigError(
                f"{prefix}.multiprocessing_context",
                ctx,
                f"needs {prefix}.num_workers > 0",
                f"set {prefix}.multiprocessing_context=null or raise {prefix}.num_workers",
            )


def validate_trial(trial: TrialConfig) -> None:
    """Reject measurement settings that cannot produce a timed window."""
    if trial.steps < 1:
        raise ConfigError("trial.steps", trial.steps, "must be >= 1", "e.g. trial.steps=40")
    if trial.warmup_steps < 0:
        raise ConfigError(
            "trial.warmup_steps", trial.warmup_steps, "must be >= 0", "e.g. trial.warmup_steps=5"
        )
    if trial.time_limit_s <= 0:
        raise ConfigError(
            "trial.time_limit_s", trial.time_limit_s, "must be > 0", "e.g. trial.time_limit_s=300"
        )
    if not 0 < trial.sample_hz <= 200:
        raise ConfigError(
            "trial.sample_hz", trial.sample_hz, "must be in (0, 200]", "e.g. trial.sample_hz=20"
        )
    if trial.torch_threads is not None and trial.torch_threads < 1:
        raise ConfigError(
            "trial.torch_threads",
            trial.torch_threads,
            "must be >= 1",
            "e.g. trial.torch_threads=1, or null for torch's default",
        )
    dev = trial.device
    if dev != "auto" and dev.split(":")[0] not in ("cpu", "cuda", "mps", "xpu"):
        raise ConfigError(
            "trial.device", dev, "is not a device", "use auto, cpu, cuda, cuda:N or mps"
        )


def validate_dataset(config: RunConfig) -> None:
    """Check what can be checked about the dataset without building it."""
    ds = config.dataset
    if isinstance(ds, ImageFolderConfig):
        root = Path(ds.root).expanduser()
        if not root.is_dir():
            raise ConfigError(
                "dataset.root",
                ds.root,
                "is not an existing directory",
                "point it at a folder laid out as <root>/<class>/<image>, "
                "e.g. dataset.root=/data/train",
            )
    elif isinstance(ds, CustomDatasetConfig):
        import_target(ds.target)


def import_target(path: str) -> Callable[..., Any]:
    """Import ``pkg.module.Class`` named by ``dataset._target_``, or say why it cannot be."""
    module_name, _, attr = path.rpartition(".")
    if not module_name:
        raise ConfigError(
            "dataset._target_", path, "is not a dotted path", "write it as my_pkg.module.MyDataset"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            "dataset._target_",
            path,
            f"cannot be imported ({exc})",
            "install the package or add its folder to PYTHONPATH",
        ) from None
    target = getattr(module, attr, None)
    if not callable(target):
        raise ConfigError(
            "dataset._target_",
            path,
            f"module {module_name} has no class {attr}",
            "check the class name",
        )
    return target  # type: ignore[no-any-return]


def validate_workload(config: RunConfig) -> None:
    """Dataset knobs, storage settings and the dataset/model pair, each checked beside its code."""
    from loadertune.datasets import check_dataset
    from loadertune.models import check_workload
    from loadertune.storage import check_storage

    check_dataset(config.dataset)
    check_storage(config.storage, config.dataset)
    check_workload(config)


def validate(config: RunConfig) -> None:
    """Run every check that needs no dataset to be built and no worker to start."""
    validate_loader(config.loader)
    validate_trial(config.trial)
    validate_dataset(config)
    validate_workload(config)
