"""What a sweep searches, and the translation between Optuna's values and Hydra's overrides.

The plan is settled once, before the first trial: the search space (Hydra's sweep grammar
turned into Optuna distributions), the fixed overrides, the workload it measures and where the
study lives. Every trial then goes values -> overrides -> composed job config.
"""

from __future__ import annotations

import copy
import itertools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.utils import get_method
from omegaconf import DictConfig, OmegaConf, open_dict
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from loadertune._lazy import torch
from loadertune.checks import WorkerCap, shard_limit, validate, worker_cap
from loadertune.config import (
    NEEDS_WORKERS,
    RunConfig,
    applies,
    plain_key,
    suggestion_order,
    to_run_config,
    workers_of,
)
from loadertune.loader import resolve_device

from ..study import _storage
from ._search_space import parse_params

if TYPE_CHECKING:
    import optuna
    from hydra.types import HydraContext

    from loadertune.checks import Shards

    from ..config import SweepSettings


MAX_ENUMERATED = 100_000  # a space with more points than this is not counted


@dataclass
class SweepPlan:
    """What the sweep searches and where it records, settled before the first trial."""

    space: dict[str, BaseDistribution]
    fixed: dict[str, str]
    base: RunConfig
    accelerator: bool
    storage: str
    study_name: str
    sweep_dir: Path
    noop: list[str] = field(default_factory=list)
    # The space as written, before the model-based guess re-ranged num_workers: baselines
    # (the doubling path) follow the written range, not the searched one.
    written: dict[str, BaseDistribution] = field(default_factory=dict)
    default_workers: int = 0  # loader.num_workers when neither the space nor fixed sets it
    shards: Shards | None = None  # a streaming dataset's shards, which bound the workers
    shard_cap: int | None = None  # its shards per rank, where they stopped the range

    def __post_init__(self) -> None:
        self.written = self.written or dict(self.space)

    def baseline_space(self) -> dict[str, BaseDistribution]:
        """The space baselines may use: the written one, widened where the search widened."""
        out = dict(self.written)
        for key, dist in self.space.items():
            old = out.get(key)
            if isinstance(dist, IntDistribution) and isinstance(old, IntDistribution):
                out[key] = IntDistribution(old.low, max(old.high, dist.high), step=old.step)
        return out

    def setting_count(self) -> int | None:
        """How many distinct settings the space can take (see :meth:`settings`); None when
        it is not finite or too large."""
        every = self.settings()
        return None if every is None else len(every)

    def settings(self) -> list[dict[str, Any]] | None:
        """Every distinct setting of the space, as the values :func:`suggest` gives: only
        values that act (no ``prefetch_factor`` without workers), ``num_workers`` first;
        None when the space is not finite or has more than ``MAX_ENUMERATED`` points."""
        keys = suggestion_order(list(self.space))
        choices: list[list[Any]] = []
        for key in keys:
            dist = self.space[key]
            if isinstance(dist, CategoricalDistribution):
                choices.append(list(dist.choices))
            elif isinstance(dist, IntDistribution):
                choices.append(list(range(dist.low, dist.high + 1, dist.step)))
            else:
                return None
        if math.prod(len(c) for c in choices) > MAX_ENUMERATED:
            return None
        seen: dict[tuple[tuple[str, Any], ...], dict[str, Any]] = {}
        for combo in itertools.product(*choices):
            values = dict(zip(keys, combo, strict=True))
            workers = _workers(values, self.fixed, self.default_workers)
            acting = {k: v for k, v in values.items() if applies(k, workers, self.accelerator)}
            seen.setdefault(tuple(acting.items()), acting)
        return list(seen.values())

    def workers_key(self) -> str | None:
        """The searched key of ``loader.num_workers`` (it may carry ``+``), if searched."""
        return next((k for k in self.space if plain_key(k) == "loader.num_workers"), None)


# A value Hydra's override grammar reads as the same plain string (no quotes, no escapes).
_PLAIN = re.compile(r"[\w./-]+")


class Composer:
    """Composes a trial's job config from overrides, as Hydra's own sweep would.

    The overrides composed last are kept (``KEPT`` of them): a sampler's repeat of measured
    settings, answered without a trial process, would otherwise pay a whole composition
    (about 0.2 s here, re-reading and merging every config file) to find its key; a copy of
    the kept job config costs about 10 ms. The config files do not change during a sweep.
    A job's own folder (``hydra.sweep.subdir``, each verdict round's) is set on the copy as
    Hydra sets it, so every round of a setting shares one composition.
    """

    KEPT = 64
    SUBDIR = "hydra.sweep.subdir="

    def __init__(self, hydra_context: HydraContext, config: DictConfig) -> None:
        self.hydra_context = hydra_context
        self.config = config
        self._kept: dict[tuple[str, ...], DictConfig] = {}

    def __call__(self, overrides: list[str], job_num: int) -> DictConfig:
        subdirs = [o for o in overrides if o.startswith(self.SUBDIR)]
        own = subdirs[0] if len(subdirs) == 1 else None
        if own is not None and not _PLAIN.fullmatch(own[len(self.SUBDIR) :]):
            own = None  # Hydra's grammar would read it: composed with the rest
        shared = [o for o in overrides if o != own]
        cfg = copy.deepcopy(self._composed(shared))  # each job's own: its id and number differ
        with open_dict(cfg):
            cfg.hydra.job.id = str(job_num)
            cfg.hydra.job.num = job_num
        if own is not None:
            cfg.hydra.sweep.subdir = own[len(self.SUBDIR) :]
            cfg.hydra.overrides.hydra.append(own)
        return cfg

    def _composed(self, overrides: list[str]) -> DictConfig:
        """Hydra's composition of ``overrides``, kept: the newest last, the oldest dropped."""
        key = tuple(overrides)
        composed = self._kept.pop(key, None)
        if composed is None:
            composed = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        self._kept[key] = composed
        if len(self._kept) > self.KEPT:
            del self._kept[next(iter(self._kept))]
        return composed

    def run_config(self, overrides: list[str], job_num: int = 0) -> RunConfig:
        """The typed, validated config those overrides give."""
        return to_run_config(self(overrides, job_num))


def make_plan(settings: SweepSettings, compose: Composer, arguments: list[str]) -> SweepPlan:
    """Parse the search space, compose one representative trial and settle the study (the
    settings themselves were checked where the sweep started, ``launch._start.start``)."""
    space, fixed = parse_params(settings.params, arguments)

    config = compose.config
    default_workers = int(config.loader.num_workers)
    base_cfg = compose(first_point(space, fixed, default_workers), job_num=0)
    base = to_run_config(base_cfg)
    validate(base)
    accelerator = torch.device(resolve_device(base.trial.device)).type in ("cuda", "xpu")
    storage = _storage.absolute_storage(settings.storage, base.paths.output_root)
    name = settings.study_name or _study_name(base, base_cfg, space)
    # Settings that cannot act on this device are not searched at all (not even by a grid).
    noop = [k for k in space if not applies(k, 1, accelerator)]
    space = {k: v for k, v in space.items() if k not in noop}
    shards = shard_limit(base)
    cap = cap_range(space, base.trial.nproc_per_node, shards)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    plan = SweepPlan(
        space, fixed, base, accelerator, storage, name, sweep_dir, noop, {}, default_workers
    )
    plan.shards = shards
    plan.shard_cap = cap.workers if cap.by == "shards" else None
    return plan


def cap_range(
    space: dict[str, BaseDistribution], nproc_per_node: int, shards: Shards | None
) -> WorkerCap:
    """Cap the searched ``num_workers`` at the most workers the machine holds and, for a
    streaming dataset, its shards per rank (more readers than shards leave some without
    data): :func:`loadertune.checks._preflight.worker_cap`, before any batch is known. The cap."""
    cap = worker_cap(nproc_per_node, shards=shards)
    most = cap.workers
    key = next((k for k in space if plain_key(k) == "loader.num_workers"), None)
    dist = space.get(key) if key else None
    if isinstance(dist, IntDistribution) and dist.high > most:
        high = max(dist.low, dist.low + ((most - dist.low) // dist.step) * dist.step)
        space[str(key)] = IntDistribution(dist.low, high, step=dist.step, log=dist.log)
    elif isinstance(dist, CategoricalDistribution) and any(
        isinstance(c, int) and c > most for c in dist.choices
    ):
        kept = [c for c in dist.choices if isinstance(c, int) and c <= most]
        space[str(key)] = CategoricalDistribution(kept or [min(dist.choices)])  # type: ignore[type-var]
    return cap


def _study_name(base: RunConfig, base_cfg: DictConfig, space: dict[str, Any]) -> str:
    """The default study name: the workload's choices and a digest of its fixed settings."""
    choices = {g: getattr(base, g).name for g in ("dataset", "storage", "model")}
    measured: dict[str, Any] = {
        k: OmegaConf.to_container(base_cfg[k], resolve=True)
        for k in ("dataset", "storage", "model", "loader", "trial")
    }
    for key in space:  # swept keys are not part of the workload's identity
        section, _, name = plain_key(key).partition(".")
        if isinstance(measured.get(section), dict):
            measured[section].pop(name, None)
    for key in NOT_IDENTITY:  # how a trial is guarded, not what it measures
        section, _, name = key.partition(".")
        measured[section].pop(name, None)
    for key in UNSET_NOT_IDENTITY:  # keys added later: unset, a study keeps its old name
        section, _, name = key.partition(".")
        if measured[section].get(name) is None:
            measured[section].pop(name, None)
    for key, default in DEFAULT_NOT_IDENTITY.items():  # added later: at its default, the same
        section, _, name = key.partition(".")
        if measured[section].get(name) == default:
            measured[section].pop(name, None)
    return _storage.default_study_name(choices, measured)


NOT_IDENTITY = ("trial.host_lock", "trial.memory_budget_mb")
UNSET_NOT_IDENTITY = ("loader.collate_fn", "loader.worker_init_fn")
DEFAULT_NOT_IDENTITY = {"trial.nproc_per_node": 1}


def first_point(
    space: dict[str, BaseDistribution], fixed: dict[str, str], default_workers: int
) -> list[str]:
    """Overrides for one representative trial: fixed values and each space's first value."""
    values: dict[str, Any] = {}
    for key, dist in space.items():
        if isinstance(dist, CategoricalDistribution):
            values[key] = dist.choices[0]
        elif isinstance(dist, IntDistribution | FloatDistribution):
            values[key] = dist.low
    return overrides(values, fixed, accelerator=False, default_workers=default_workers)


def overrides(
    values: dict[str, Any], fixed: dict[str, str], accelerator: bool, default_workers: int
) -> list[str]:
    """The overrides of one trial: the settings that can act with its workers, on its device."""
    workers = _workers(values, fixed, default_workers)
    lines = [f"{k}={v}" for k, v in fixed.items() if applies(k, workers, accelerator)]
    lines += [f"{k}={render(v)}" for k, v in values.items() if applies(k, workers, accelerator)]
    return lines


def _workers(values: dict[str, Any], fixed: dict[str, str], default: int) -> int:
    found = workers_of(values)
    if found is None:
        found = workers_of(fixed, default)
    return default if found is None else found


def suggest(
    trial: optuna.Trial,
    plan: SweepPlan,
    custom_search_space: str | None = None,
    config: DictConfig | None = None,
) -> dict[str, Any]:
    """Ask the trial for each setting of the space that can act, ``num_workers`` first."""
    values: dict[str, Any] = {}
    for key in suggestion_order(list(plan.space)):
        needs_workers = plain_key(key) in NEEDS_WORKERS
        workers = _workers(values, plan.fixed, plan.default_workers) if needs_workers else 0
        if not applies(key, workers, plan.accelerator):
            continue
        values[key] = suggest_one(trial, key, plan.space[key])
    if custom_search_space:
        get_method(custom_search_space)(config, trial)
        values.update({k: v for k, v in trial.params.items() if k not in values})
    return values


def suggest_one(trial: optuna.Trial, key: str, dist: BaseDistribution) -> Any:
    """One ``suggest_*`` call for ``dist``."""
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(key, dist.low, dist.high, step=dist.step, log=dist.log)
    if isinstance(dist, FloatDistribution):
        return trial.suggest_float(key, dist.low, dist.high, step=dist.step, log=dist.log)
    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(key, dist.choices)
    raise TypeError(f"{key}: unsupported distribution {dist!r}")


def render(value: Any) -> str:
    """A Python value as override text Hydra parses back to the same value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        parser = OverridesParser.create()
        try:
            if parser.parse_override(f"k={value}").value() == value:
                return value
        except Exception:
            pass
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return str(value)
