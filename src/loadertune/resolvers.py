"""OmegaConf resolvers the configs use, registered before Hydra composes anything."""

from __future__ import annotations

from omegaconf import OmegaConf


def max_workers(per_cpu: int = 2, ranks: int = 1) -> int:
    """Upper bound of the default ``num_workers`` search: ``per_cpu`` x the usable CPUs of
    each of ``ranks`` ranks on the node (``trial.nproc_per_node``)."""
    from loadertune.machine import cpus_per_rank

    return per_cpu * cpus_per_rank(int(ranks))


def register() -> None:
    """Register ``${loadertune.max_workers:N,RANKS}`` (idempotent)."""
    if not OmegaConf.has_resolver("loadertune.max_workers"):
        OmegaConf.register_new_resolver("loadertune.max_workers", max_workers)
