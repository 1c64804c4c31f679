"""Checks that run before anything starts: each failure names the config key and the fix.

PyTorch itself rejects some of these only when the first iterator is created (an
``AssertionError`` deep in a worker), and accepts others silently (``pin_memory`` without an
accelerator). Checking here means a bad value costs nothing and leaves nothing half-written.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import multiprocessing
from pathlib import Path

from loadertune._lazy import torch
from loadertune.checks._host_lock import check_mode
from loadertune.checks._preflight import check_worker_count
from loadertune.checks._shards import check_shards, configured_shards
from loadertune.checks._user_code import check_user_code
from loadertune.config import (
    START_METHODS,
    CustomDatasetConfig,
    ImageFolderConfig,
    LoaderConfig,
    RunConfig,
    TrialConfig,
    import_target,
)
from loadertune.config import _torch_rules as torch_rules
from loadertune.datasets import check_dataset
from loadertune.errors import ConfigError
from loadertune.machine import cpu_budget
from loadertune.measure import MAX_STEPS_FACTOR, MIN_STEPS
from loadertune.models import check_workload
from loadertune.storage import check_storage


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
    if pf is not None and (isinstance(pf, bool) or not isinstance(pf, int) or pf < 1):
        raise ConfigError(
            f"{prefix}.prefetch_factor",
            pf,
            "must be an integer >= 1 (batches loaded in advance per worker)",
            f"e.g. {prefix}.prefetch_factor=2, or null for PyTorch's default",
        )
    ctx = loader.multiprocessing_context
    available = [m for m in START_METHODS if m in multiprocessing.get_all_start_methods()]
    if ctx is not None and ctx not in available:
        raise ConfigError(
            f"{prefix}.multiprocessing_context",
            ctx,
            "is not a start method this platform offers",
            f"use one of {', '.join(available)}, or null for the platform default",
        )
    if nw == 0:
        _refuse_what_needs_workers(loader, prefix)


def _refuse_what_needs_workers(loader: LoaderConfig, prefix: str) -> None:
    """Raise for the first setting that PyTorch accepts only with ``num_workers > 0``."""
    for field in dataclasses.fields(loader):
        value = getattr(loader, field.name)
        if not torch_rules.needs_workers(field.name) or value is None or value is False:
            continue
        unset = "false" if isinstance(value, bool) else "null"
        raise ConfigError(
            f"{prefix}.{field.name}",
            value,
            f"needs {prefix}.num_workers > 0",
            f"set {prefix}.{field.name}={unset} or raise {prefix}.num_workers",
        )


def validate_trial(trial: TrialConfig) -> None:
    """Reject measurement settings that cannot produce a timed window."""
    if trial.steps < MIN_STEPS:
        raise ConfigError(
            "trial.steps",
            trial.steps,
            f"must be >= {MIN_STEPS}: a window of fewer steps measures noise, not a rate",
            "e.g. trial.steps=40",
        )
    check_mode("trial.host_lock", trial.host_lock)
    if trial.max_steps is not None and trial.max_steps < trial.steps:
        raise ConfigError(
            "trial.max_steps",
            trial.max_steps,
            f"must be >= trial.steps ({trial.steps}), the steps timed at least",
            f"e.g. trial.max_steps={MAX_STEPS_FACTOR * trial.steps}, or null for "
            f"{MAX_STEPS_FACTOR} x trial.steps",
        )
    if trial.precision is not None and not 0 < trial.precision < 1:
        raise ConfigError(
            "trial.precision",
            trial.precision,
            "must be in (0, 1): the relative half-width of the rate's 95% interval",
            "e.g. trial.precision=0.02 (2%), or null to time exactly trial.steps",
        )
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
    if trial.memory_budget_mb is not None and trial.memory_budget_mb <= 0:
        raise ConfigError(
            "trial.memory_budget_mb",
            trial.memory_budget_mb,
            "must be > 0",
            "e.g. trial.memory_budget_mb=8000, or null for 3/4 of the memory available",
        )
    dev = trial.device
    if dev != "auto" and dev.split(":")[0] not in ("cpu", "cuda", "mps", "xpu"):
        raise ConfigError(
            "trial.device", dev, "is not a device", "use auto, cpu, cuda, cuda:N or mps"
        )
    validate_ranks(trial)


def validate_ranks(trial: TrialConfig) -> None:
    """Refuse a ``trial.nproc_per_node`` the node cannot run: fewer than one rank, more ranks
    than usable CPUs, or (on CUDA) more ranks than visible GPUs, one GPU per rank."""
    n = trial.nproc_per_node
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(
            "trial.nproc_per_node",
            n,
            "must be an integer >= 1 (training processes on the node, as torchrun's "
            "--nproc-per-node)",
            "e.g. trial.nproc_per_node=2, or 1 for a single process",
        )
    if n == 1:
        return
    budget = cpu_budget()
    if n > budget.count:
        raise ConfigError(
            "trial.nproc_per_node",
            n,
            f"is more ranks than the {budget.count} CPUs this process may use "
            f"(its {budget.source} limit); each rank needs one at least",
            f"use trial.nproc_per_node<={budget.count}",
        )
    if trial.device.startswith("cuda") or trial.device == "auto":
        gpus = torch.cuda.device_count()
        if (trial.device != "auto" or gpus > 0) and n > gpus:
            raise ConfigError(
                "trial.nproc_per_node",
                n,
                f"needs one GPU per rank on trial.device={trial.device}, and {gpus} are visible",
                f"use trial.nproc_per_node<={max(gpus, 1)}, or trial.device=cpu",
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
    elif ds.name in STREAMING_PACKAGES:
        _check_streaming_extra(ds.name)


STREAMING_PACKAGES = {"webdataset": "webdataset", "hf_iterable": "datasets"}
"""The package each built-in streaming dataset reads with (the ``streaming`` extra)."""


def _check_streaming_extra(name: str) -> None:
    """Refuse a streaming dataset whose package is not installed, with the install line."""
    package = STREAMING_PACKAGES[name]
    if importlib.util.find_spec(package) is None:
        raise ConfigError(
            "dataset.name",
            name,
            f"reads with the {package} package, which is not installed",
            "pip install 'loadertune[streaming]'",
        )


def validate_workload(config: RunConfig) -> None:
    """Dataset knobs, storage settings and the dataset/model pair, each checked beside its code."""

    check_dataset(config.dataset)
    check_storage(config.storage, config.dataset)
    check_workload(config)


def check_configured_shards(config: RunConfig) -> None:
    """A built-in streaming dataset's readers against its shards, from the config alone
    (a user's own iterable is checked once built, :mod:`loadertune.checks._preflight`)."""

    shards = configured_shards(config)
    if shards is not None:
        check_shards(config.loader, shards, config.trial.nproc_per_node)


def validate(config: RunConfig) -> None:
    """Run every check that needs no dataset to be built and no worker to start."""

    validate_loader(config.loader)
    validate_trial(config.trial)  # trial.nproc_per_node first: the worker cap counts ranks
    check_worker_count(config.loader, config.trial.nproc_per_node)
    validate_dataset(config)
    check_configured_shards(config)
    validate_workload(config)

    check_user_code(config)
