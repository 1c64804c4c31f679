"""OmegaConf resolvers the configs use, registered before Hydra composes anything."""

from __future__ import annotations

from omegaconf import OmegaConf


def max_workers(per_cpu: int = 2) -> int:
    """Upper bound of the default ``num_workers`` search: ``per_cpu`` x usable CPUs."""
    from loadertune.machine import usable_cpus

    return per_cpu * usable_cpus()


def register() -> None:
    """Register ``${loadertune.max_workers:N}`` (idempotent)."""
    if not OmegaConf.has_resolver("loadertune.max_workers"):
        OmegaConf.register_new_resolver("loadertune.max_workers", max_workers)
