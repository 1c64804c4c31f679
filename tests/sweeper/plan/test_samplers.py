"""Sampler and pruner configs: composed through Hydra, built, and run on tiny studies."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import optuna
import pytest
from hydra import compose, initialize
from hydra.core.config_store import ConfigStore
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from hydra_plugins.loadertune_sweeper import config
from hydra_plugins.loadertune_sweeper.plan import _samplers
from hydra_plugins.loadertune_sweeper.plan._samplers import create_pruner, create_sampler
from hydra_plugins.loadertune_sweeper.plan._search_space import parse_params
from hydra_plugins.loadertune_sweeper.plan._settings_checks import sweep_settings
from hydra_plugins.loadertune_sweeper.trial._noise_pruner import IntervalPruner
from tests.conftest import ROOT

SRC = ROOT / "src"

DISCRETE_SPACE: dict[str, BaseDistribution] = {
    "loader.batch_size": CategoricalDistribution([16, 32, 64]),
    "loader.num_workers": IntDistribution(0, 4, step=2),
}

SAMPLERS = {
    "tpe": optuna.samplers.TPESampler,
    "random": optuna.samplers.RandomSampler,
    "grid": optuna.samplers.GridSampler,
    "gp": optuna.samplers.GPSampler,
    "qmc": optuna.samplers.QMCSampler,
    "cmaes": optuna.samplers.CmaEsSampler,
    "bruteforce": optuna.samplers.BruteForceSampler,
}
PRUNERS = {
    "interval": IntervalPruner,
    "median": optuna.pruners.MedianPruner,
    "percentile": optuna.pruners.PercentilePruner,
    "hyperband": optuna.pruners.HyperbandPruner,
    "none": optuna.pruners.NopPruner,
}


@pytest.fixture(autouse=True)
def _quiet_optuna() -> Iterator[None]:
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    yield
    optuna.logging.set_verbosity(level)


@pytest.fixture
def optional_modules_present(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend cmaes, scipy and torch are installed, so construction can be tested anywhere."""
    monkeypatch.setattr(_samplers, "_module_available", lambda name: True)


def sweeper_cfg(*overrides: str) -> DictConfig:
    """Compose Hydra's own config with the loadertune sweeper selected, as a sweep would."""
    with initialize(version_base=None):
        cfg = compose(overrides=["hydra/sweeper=loadertune", *overrides], return_hydra_config=True)
    sweeper = cfg.hydra.sweeper
    assert isinstance(sweeper, DictConfig)
    return sweeper


def suggest_all(trial: optuna.Trial, space: Mapping[str, BaseDistribution]) -> dict[str, Any]:
    """Suggest every parameter through Optuna's public API, as the sweeper will."""
    for name, dist in space.items():
        if isinstance(dist, CategoricalDistribution):
            trial.suggest_categorical(name, dist.choices)
        elif isinstance(dist, IntDistribution):
            trial.suggest_int(name, dist.low, dist.high, step=dist.step, log=dist.log)
        else:
            assert isinstance(dist, FloatDistribution)
            trial.suggest_float(name, dist.low, dist.high, step=dist.step, log=dist.log)
    return trial.params


def test_option_names_match_the_brief() -> None:
    assert set(config.SAMPLER_CONFIGS) == set(SAMPLERS)
    assert set(config.PRUNER_CONFIGS) == set(PRUNERS)


def test_sweeper_defaults() -> None:
    cfg = sweeper_cfg()
    assert cfg._target_ == "hydra_plugins.loadertune_sweeper.loadertune_sweeper.LoadertuneSweeper"
    assert cfg.sampler._target_ == "optuna.samplers.TPESampler"
    assert cfg.pruner._target_.endswith("_noise_pruner.IntervalPruner")
    assert cfg.pruner.tolerance == 0.05
    assert cfg.direction == "minimize"
    assert cfg.n_trials == 12
    assert "n_jobs" not in cfg  # trials never share a machine: no such setting
    assert cfg.allow_parallel_trials is False
    assert cfg.max_failure_rate == 1.0
    assert cfg.storage is None and cfg.study_name is None and cfg.max_trials_total is None
    assert cfg.params is None and cfg.custom_search_space is None


def test_sweeper_params_from_a_config_file_become_strings() -> None:
    """A YAML ``num_workers: 4`` under params reaches the parser as the text "4"."""
    ConfigStore.instance().store(
        name="loadertune_test_app",
        node={
            "defaults": [{"override hydra/sweeper": "loadertune"}, "_self_"],
            "hydra": {"sweeper": {"params": {"loader.num_workers": 4, "x": "choice(1,2)"}}},
        },
    )
    with initialize(version_base=None):
        cfg = compose("loadertune_test_app", return_hydra_config=True)
    raw = OmegaConf.to_container(cfg.hydra.sweeper, resolve=False)
    assert isinstance(raw, dict)
    # What Hydra's instantiate hands the sweeper: the node less its own _target_/_recursive_.
    params = sweep_settings({str(k): v for k, v in raw.items() if k[0] != "_"}).params
    assert params is not None
    assert params["loader.num_workers"] == "4" and params["x"] == "choice(1,2)"


class _Recorder:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


def test_sweeper_receives_sampler_and_pruner_as_config() -> None:
    """Hydra must not build the sampler itself: grid needs the search space first."""
    cfg = sweeper_cfg("hydra/sweeper/sampler=grid")
    built = instantiate(cfg, _target_=_Recorder)
    assert isinstance(built, _Recorder)
    assert isinstance(built.kwargs["sampler"], DictConfig)
    assert isinstance(built.kwargs["pruner"], DictConfig)


@pytest.mark.usefixtures("optional_modules_present")
@pytest.mark.parametrize(("name", "expected"), SAMPLERS.items(), ids=list(SAMPLERS))
def test_every_sampler_composes_and_builds(name: str, expected: type) -> None:
    cfg = sweeper_cfg(f"hydra/sweeper/sampler={name}", "hydra.sweeper.sampler.seed=7")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # ExperimentalWarning is logged, not emitted
        sampler = create_sampler(cfg.sampler, DISCRETE_SPACE)
    assert type(sampler) is expected


@pytest.mark.parametrize(("name", "expected"), PRUNERS.items(), ids=list(PRUNERS))
def test_every_pruner_composes_and_builds(name: str, expected: type) -> None:
    cfg = sweeper_cfg(f"hydra/sweeper/pruner={name}")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pruner = create_pruner(cfg.pruner)
    assert type(pruner) is expected


def test_no_pruner_config_means_never_prune() -> None:
    assert isinstance(create_pruner(None), optuna.pruners.NopPruner)


def test_sampler_options_reach_optuna() -> None:
    """Same seed in the config, same proposals; another seed, other proposals."""
    space = {"x": FloatDistribution(0.0, 1.0)}

    def proposals(seed: int) -> list[float]:
        cfg = sweeper_cfg("hydra/sweeper/sampler=random", f"hydra.sweeper.sampler.seed={seed}")
        study = optuna.create_study(sampler=create_sampler(cfg.sampler, space))
        study.optimize(lambda t: suggest_all(t, space)["x"], n_trials=3)
        return [t.params["x"] for t in study.trials]

    assert proposals(1) == proposals(1)
    assert proposals(1) != proposals(2)


def test_grid_sampler_covers_the_grid_exactly_once() -> None:
    space, _ = parse_params(
        {"loader.batch_size": "choice(16,32,64)", "loader.num_workers": "range(0,5,2)"},
        ["loader.prefetch_factor=range(0.1,0.4,0.1)"],
    )
    sampler = create_sampler(sweeper_cfg("hydra/sweeper/sampler=grid").sampler, space)
    study = optuna.create_study(sampler=sampler)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # GridSampler warns on values off the distribution
        study.optimize(lambda t: float(len(suggest_all(t, space))), n_trials=100)
    keys = ["loader.batch_size", "loader.num_workers", "loader.prefetch_factor"]
    seen = [tuple(t.params[k] for k in keys) for t in study.trials]
    expected = set(itertools.product([16, 32, 64], [0, 2, 4], [0.1, 0.2, 0.3]))
    assert len(seen) == len(expected) == 27  # stopped once the grid was exhausted
    assert set(seen) == expected


def test_grid_sampler_uses_a_configured_grid() -> None:
    space = {"a": IntDistribution(0, 9)}
    cfg = {"_target_": "optuna.samplers.GridSampler", "search_space": {"a": [3, 5]}}
    study = optuna.create_study(sampler=create_sampler(cfg, space))
    study.optimize(lambda t: float(t.suggest_int("a", 0, 9)), n_trials=10)
    assert sorted(t.params["a"] for t in study.trials) == [3, 5]


def test_grid_sampler_configured_grid_must_cover_the_space() -> None:
    cfg = {"_target_": "optuna.samplers.GridSampler", "search_space": {"a": [1]}}
    with pytest.raises(
        ValueError, match=r"search_space has no values for loader\.batch_size, loader\.num_workers;"
    ):
        create_sampler(cfg, {"a": IntDistribution(0, 1), **DISCRETE_SPACE})


@pytest.mark.parametrize("name", ["grid", "bruteforce"])
def test_exhaustive_samplers_refuse_continuous_parameters(name: str) -> None:
    space = {**DISCRETE_SPACE, "loader.timeout": FloatDistribution(0.0, 1.0)}
    cfg = sweeper_cfg(f"hydra/sweeper/sampler={name}")
    with pytest.raises(ValueError, match=rf"sampler={name} .*loader\.timeout is continuous"):
        create_sampler(cfg.sampler, space)


def test_bruteforce_covers_a_discrete_space_exactly_once() -> None:
    sampler = create_sampler(
        sweeper_cfg("hydra/sweeper/sampler=bruteforce").sampler, DISCRETE_SPACE
    )
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: float(len(suggest_all(t, DISCRETE_SPACE))), n_trials=100)
    seen = [(t.params["loader.batch_size"], t.params["loader.num_workers"]) for t in study.trials]
    assert sorted(seen) == sorted(itertools.product([16, 32, 64], [0, 2, 4]))


@pytest.mark.parametrize(
    ("name", "missing", "package"),
    [("cmaes", {"cmaes"}, "cmaes"), ("gp", {"torch"}, "torch"), ("gp", {"scipy"}, "scipy")],
)
def test_missing_optional_package_fails_at_build_time(
    monkeypatch: pytest.MonkeyPatch, name: str, missing: set[str], package: str
) -> None:
    monkeypatch.setattr(_samplers, "_module_available", lambda module: module not in missing)
    cfg = sweeper_cfg(f"hydra/sweeper/sampler={name}")
    with pytest.raises(ImportError, match=rf"needs {package}: pip install {package}"):
        create_sampler(cfg.sampler, DISCRETE_SPACE)


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"seed": 1}, r"hydra\.sweeper\.sampler needs a _target_"),
        ({"_target_": "optuna.samplers.NoSuchSampler"}, r"_target_=.*NoSuchSampler cannot be"),
        ({"_target_": "optuna.pruners.NopPruner"}, r"is not an optuna BaseSampler"),
        (
            {"_target_": "optuna.samplers.TPESampler", "n_startup_trails": 3},
            r"(?s)hydra\.sweeper\.sampler: cannot build optuna\.samplers\.TPESampler.*"
            r"n_startup_trails",
        ),
        (
            {"_target_": "optuna.samplers.QMCSampler", "qmc_type": "LHS"},
            r"(?s)hydra\.sweeper\.sampler: cannot build .*LHS",
        ),
    ],
)
def test_bad_sampler_config_names_the_key(cfg: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        create_sampler(cfg, DISCRETE_SPACE)


def test_bad_pruner_config_names_the_key() -> None:
    with pytest.raises(ValueError, match=r"hydra\.sweeper\.pruner\._target_=.* not an optuna"):
        create_pruner({"_target_": "optuna.samplers.RandomSampler"})


def test_fresh_plugin_scan_registers_the_configs_and_stays_light() -> None:
    """Hydra's scanner imports config.py at every start, in a way of its own.

    It executes the module before registering it in ``sys.modules`` (so string annotations
    from ``from __future__ import annotations`` break the dataclasses), reports any warning
    to stderr, and must not pull in optuna, torch or mlflow.
    """
    code = (
        "import sys\n"
        "from hydra.core.plugins import Plugins\n"
        "from hydra.core.config_store import ConfigStore\n"
        "Plugins.instance()\n"
        "repo = ConfigStore.instance().repo['hydra']['sweeper']\n"
        "print(sorted(repo['sampler']), sorted(repo['pruner']), 'loadertune.yaml' in repo)\n"
        "print(sorted(m for m in ('optuna', 'torch', 'mlflow') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    samplers = sorted(f"{name}.yaml" for name in SAMPLERS)
    pruners = sorted(f"{name}.yaml" for name in PRUNERS)
    assert result.stdout.splitlines() == [f"{samplers} {pruners} True", "[]"]
