"""Build the Optuna sampler and pruner from the sweeper's config nodes.

Building happens here, not in Hydra's recursive instantiation (the sweeper schema sets
``_recursive_: false``), because two samplers depend on the search space: ``GridSampler``
needs the value lists, and ``BruteForceSampler`` only works on finite spaces. Checking
those, and the optional packages some samplers import on their second trial, at build time
turns a failure in the middle of a sweep into a clear error before the first trial.
"""

from __future__ import annotations

import importlib.util
import logging
import warnings
from collections.abc import Mapping
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf
from optuna.distributions import BaseDistribution
from optuna.exceptions import ExperimentalWarning
from optuna.pruners import BasePruner, NopPruner
from optuna.samplers import (
    BaseSampler,
    BruteForceSampler,
    CmaEsSampler,
    GPSampler,
    GridSampler,
)

from loadertune.config import check_finite

from ._search_space import continuous_keys, grid_search_space

__all__ = ["create_pruner", "create_sampler"]

_log = logging.getLogger(__name__)

# Packages a sampler imports only once it starts modelling (CMA-ES from its second trial):
# (import name, pip name).
_REQUIRED_MODULES: dict[type[BaseSampler], tuple[tuple[str, str], ...]] = {
    CmaEsSampler: (("cmaes", "cmaes"),),
    GPSampler: (("scipy", "scipy"), ("torch", "torch")),
}


def create_sampler(
    sampler_cfg: Mapping[str, Any], search_space: Mapping[str, BaseDistribution]
) -> BaseSampler:
    """Build the sampler ``hydra.sweeper.sampler`` describes, for ``search_space``.

    Args:
        sampler_cfg: The ``hydra.sweeper.sampler`` node (a ``DictConfig`` or plain mapping)
            with ``_target_`` naming an Optuna sampler class and its options.
        search_space: Distributions from ``parse_params``; the grid sampler's value lists
            are derived from it when ``search_space`` is null in ``sampler_cfg``.

    Returns:
        The sampler. Optuna's ExperimentalWarning (QMC, brute force, TPE ``group``, which
        the default sampler uses) is logged at DEBUG instead of emitted: the sampler was
        chosen on purpose, and the warning would abort runs that treat warnings as errors.

    Raises:
        ValueError: naming ``hydra.sweeper.sampler``, when ``_target_`` is missing or is not
            an Optuna sampler, an option is invalid, the grid sampler's values miss a key
            of the search space, or a grid or brute-force search meets a continuous
            parameter.
        ImportError: when the sampler needs a package that is not installed.
    """
    options = _plain_options(sampler_cfg, "hydra.sweeper.sampler")
    sampler_cls = _target_class(options, "hydra.sweeper.sampler", BaseSampler)
    _require_modules(sampler_cls)
    if issubclass(sampler_cls, GridSampler):
        options["search_space"] = _grid(options.get("search_space"), search_space)
    elif issubclass(sampler_cls, BruteForceSampler):
        _require_finite(search_space, "bruteforce")
    sampler = _build(options, "hydra.sweeper.sampler")
    assert isinstance(sampler, BaseSampler)
    return sampler


def create_pruner(pruner_cfg: Mapping[str, Any] | None) -> BasePruner:
    """Build the pruner ``hydra.sweeper.pruner`` describes.

    Args:
        pruner_cfg: The ``hydra.sweeper.pruner`` node with ``_target_`` naming an Optuna
            pruner class and its options; ``None`` means never prune.

    Returns:
        The pruner (``NopPruner`` for ``None``).

    Raises:
        ValueError: naming ``hydra.sweeper.pruner``, when ``_target_`` is missing or is not
            an Optuna pruner, or an option is invalid.
    """
    if pruner_cfg is None:
        return NopPruner()
    options = _plain_options(pruner_cfg, "hydra.sweeper.pruner")
    _target_class(options, "hydra.sweeper.pruner", BasePruner)
    pruner = _build(options, "hydra.sweeper.pruner")
    assert isinstance(pruner, BasePruner)
    return pruner


def _plain_options(cfg: Mapping[str, Any], key: str) -> dict[str, Any]:
    """Return the node as a plain, resolved dict, so Optuna never sees OmegaConf types."""
    if isinstance(cfg, DictConfig):
        container = OmegaConf.to_container(cfg, resolve=True)
        assert isinstance(container, dict)
        options = {str(name): value for name, value in container.items()}
    else:
        options = dict(cfg)
    if not isinstance(options.get("_target_"), str):
        raise ValueError(f"{key} needs a _target_ naming an Optuna class; got {cfg!r}.")
    check_finite(key, options, "conf/config.yaml, under hydra.sweeper")  # as every schema's
    return options


def _target_class(options: Mapping[str, Any], key: str, base: type) -> type:
    """Import ``_target_`` and check that it is a subclass of ``base``."""
    target = options["_target_"]
    try:
        cls = get_class(target)
    except (ImportError, ValueError) as exc:
        raise ValueError(f"{key}._target_={target} cannot be imported: {exc}") from exc
    if not issubclass(cls, base):
        raise ValueError(f"{key}._target_={target} is not an optuna {base.__name__}.")
    return cls


def _module_available(name: str) -> bool:
    """Return whether ``name`` can be imported, without importing it."""
    return importlib.util.find_spec(name) is not None


def _require_modules(sampler_cls: type) -> None:
    """Fail now, not on trial two, when the sampler's optional packages are missing."""
    for cls, modules in _REQUIRED_MODULES.items():
        if not issubclass(sampler_cls, cls):
            continue
        missing = [pip_name for name, pip_name in modules if not _module_available(name)]
        if missing:
            raise ImportError(
                f"hydra.sweeper.sampler {sampler_cls.__name__} needs {', '.join(missing)}: "
                f"pip install {' '.join(missing)}, or choose another sampler, e.g. "
                "hydra/sweeper/sampler=tpe."
            )


def _require_finite(search_space: Mapping[str, BaseDistribution], sampler: str) -> None:
    """Refuse continuous parameters, which an exhaustive search cannot enumerate."""
    continuous = continuous_keys(search_space)
    if continuous:
        raise ValueError(
            f"hydra/sweeper/sampler={sampler} needs a finite search space, but "
            f"{', '.join(continuous)} {'is' if len(continuous) == 1 else 'are'} continuous; "
            "sweep them with choice(...) or range(...), or use another sampler."
        )


def _grid(
    configured: Mapping[str, Any] | None, search_space: Mapping[str, BaseDistribution]
) -> dict[str, list[Any]]:
    """Return the grid: the configured one if given, else one derived from the space."""
    if configured is None:
        _require_finite(search_space, "grid")
        return grid_search_space(search_space)
    missing = sorted(set(search_space) - set(configured))
    if missing:
        raise ValueError(
            f"hydra.sweeper.sampler.search_space has no values for {', '.join(missing)}; "
            "add them, or set it to null to derive the grid from the params."
        )
    return {str(name): list(values) for name, values in configured.items()}


def _build(options: dict[str, Any], key: str) -> Any:
    """Instantiate ``options``, logging Optuna's ExperimentalWarning instead of emitting it."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            built = instantiate(options, _convert_="all")
        except InstantiationException as exc:
            raise ValueError(f"{key}: cannot build {options['_target_']}: {exc}") from exc
    for warning in caught:
        if issubclass(warning.category, ExperimentalWarning):  # TPE's group is the default
            _log.debug("%s: %s", key, warning.message)
        else:
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    return built
