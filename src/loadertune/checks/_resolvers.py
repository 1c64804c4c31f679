"""OmegaConf resolvers the configs use, registered before Hydra composes anything."""

from __future__ import annotations

from omegaconf import OmegaConf

from loadertune.checks._preflight import worker_cap
from loadertune.machine import cpus_per_rank


def max_workers(per_cpu: int = 2, ranks: int = 1) -> int:
    """Top of the default ``num_workers`` range, where a sweep starts searching: ``per_cpu``
    x the usable CPUs of each of ``ranks`` ranks on the node (``trial.nproc_per_node``),
    within what the machine holds (:func:`loadertune.checks._preflight.worker_cap`, the one bound of
    every range). The model-based guess moves it once the default trial is measured: wider
    for loading that waits on reads, narrower when a few workers hide loading.

    A ``ranks`` that is no count (``abc``, null, empty) is read as 1 here: the bound still
    resolves, and the config's check refuses the value itself in one line naming the key
    (:func:`loadertune.checks._validation.validate_ranks`), where a resolver's error would be a
    traceback from inside OmegaConf."""
    count = ranks if isinstance(ranks, int) and not isinstance(ranks, bool) else 1
    return min(per_cpu * cpus_per_rank(count), worker_cap(count).workers)


def register() -> None:
    """Register ``${loadertune.max_workers:N,RANKS}`` (idempotent)."""
    if not OmegaConf.has_resolver("loadertune.max_workers"):
        OmegaConf.register_new_resolver("loadertune.max_workers", max_workers)
