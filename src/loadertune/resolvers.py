"""OmegaConf resolvers the configs use, registered before Hydra composes anything."""

from __future__ import annotations

from omegaconf import OmegaConf


def max_workers(per_cpu: int = 2, ranks: int = 1) -> int:
    """Upper bound of the default ``num_workers`` search: ``per_cpu`` x the usable CPUs of
    each of ``ranks`` ranks on the node (``trial.nproc_per_node``).

    A ``ranks`` that is no count (``abc``, null, empty) is read as 1 here: the bound still
    resolves, and the config's check refuses the value itself in one line naming the key
    (:func:`loadertune.validation.validate_ranks`), where a resolver's error would be a
    traceback from inside OmegaConf."""
    from loadertune.machine import cpus_per_rank

    count = ranks if isinstance(ranks, int) and not isinstance(ranks, bool) else 1
    return per_cpu * cpus_per_rank(count)


def register() -> None:
    """Register ``${loadertune.max_workers:N,RANKS}`` (idempotent)."""
    if not OmegaConf.has_resolver("loadertune.max_workers"):
        OmegaConf.register_new_resolver("loadertune.max_workers", max_workers)
