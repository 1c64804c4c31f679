"""Several ranks on a node (``trial.nproc_per_node``): the refusals, the per-rank CPUs and
the node totals, and what stays exactly as it was with one rank."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, replace

import psutil
import pytest
import torch
from omegaconf import DictConfig, OmegaConf
from optuna.distributions import CategoricalDistribution, IntDistribution

from hydra_plugins.loadertune_sweeper.plan import _baselines, _sweep_plan
from hydra_plugins.loadertune_sweeper.plan._baselines import Role
from hydra_plugins.loadertune_sweeper.plan._guess import from_default_trial
from loadertune.checks import _preflight as preflight
from loadertune.checks import _validation as validation
from loadertune.config._search_rules import _trial_identity, effective_key
from loadertune.config._typed import LoaderConfig, RunConfig, TrialConfig, to_run_config
from loadertune.errors import ConfigError
from loadertune.machine._host import CpuBudget
from loadertune.record._failures import InfeasibleSetting
from tests.conftest import ROOT
from tests.decision.test_guess import BUDGET_MB, default_trial


class Items(torch.utils.data.Dataset[torch.Tensor]):
    """``length`` items of ``floats`` float32 values each."""

    def __init__(self, length: int, floats: int) -> None:
        self.length, self.floats = length, floats

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.zeros(self.floats)


def _cpus(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    """This process may use ``count`` CPUs (as far as validation and pre-flight see)."""
    monkeypatch.setattr(validation, "cpu_budget", lambda: CpuBudget(count, "cgroup", 64, count))


# ---- trial.nproc_per_node itself -----------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, True, 2.5])
def test_fewer_than_one_rank_is_refused(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"^trial\.nproc_per_node=.*>= 1.*Fix: ") as info:
        validation.validate_trial(replace(TrialConfig(), nproc_per_node=bad))  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_more_ranks_than_usable_cpus_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _cpus(monkeypatch, 4)
    validation.validate_trial(replace(TrialConfig(), device="cpu", nproc_per_node=4))
    with pytest.raises(
        ConfigError, match=r"^trial\.nproc_per_node=5: .*4 CPUs.*cgroup.*<=4$"
    ) as info:
        validation.validate_trial(replace(TrialConfig(), device="cpu", nproc_per_node=5))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_more_ranks_than_visible_gpus_is_refused_on_cuda(
    monkeypatch: pytest.MonkeyPatch, device: str
) -> None:
    _cpus(monkeypatch, 16)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    validation.validate_trial(replace(TrialConfig(), device=device, nproc_per_node=2))
    with pytest.raises(ConfigError, match=r"^trial\.nproc_per_node=3: .*2 are visible"):
        validation.validate_trial(replace(TrialConfig(), device=device, nproc_per_node=3))


def test_gpus_do_not_bound_ranks_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    _cpus(monkeypatch, 16)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    validation.validate_trial(replace(TrialConfig(), device="cpu", nproc_per_node=8))
    validation.validate_trial(replace(TrialConfig(), device="auto", nproc_per_node=8))


def test_the_key_is_documented_in_the_trial_yaml(
    compose: Callable[[Sequence[str]], DictConfig],
) -> None:
    assert to_run_config(compose([])).trial.nproc_per_node == 1
    assert to_run_config(compose(["trial.nproc_per_node=2"])).trial.nproc_per_node == 2


# ---- pre-flight counts every rank's batches ------------------------------------------------


def test_node_totals_are_every_ranks_and_one_rank_is_unchanged() -> None:
    loader = LoaderConfig(batch_size=8, num_workers=3, prefetch_factor=2)
    _, one = preflight.check(loader, Items(64, 1024))
    _, default = preflight.check(loader, Items(64, 1024), nproc_per_node=1)
    _, four = preflight.check(loader, Items(64, 1024), nproc_per_node=4)
    assert one == default
    assert "fds_needed_node" not in one
    assert one["batch_mb"] == four["batch_mb"] == 8 * 1024 * 4 / 2**20
    assert one["memory_needed_mb"] == one["batch_mb"] * (3 * 2 + 2)
    assert four["memory_needed_mb"] == 4 * one["memory_needed_mb"]
    assert four["shm_needed_mb"] == 4 * one["shm_needed_mb"]
    assert four["fds_needed"] == one["fds_needed"]  # RLIMIT_NOFILE is each process's own
    assert four["fds_needed_node"] == 4 * one["fds_needed"]


def test_a_node_short_of_memory_for_every_rank_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loader = LoaderConfig(batch_size=8, num_workers=1, prefetch_factor=2)
    batch = 8 * 1024 * 4
    available = batch * 4 * 3.5 / preflight.MEMORY_HEADROOM  # three ranks fit, four do not

    class Memory:
        def __init__(self) -> None:
            self.available = available

    monkeypatch.setattr(psutil, "virtual_memory", Memory)
    monkeypatch.setattr(preflight, "_check_shared", lambda *_: {})
    preflight.check(loader, Items(64, 1024), nproc_per_node=3)
    with pytest.raises(InfeasibleSetting, match=r"x 4 in flight and in use x 4 ranks"):
        preflight.check(loader, Items(64, 1024), nproc_per_node=4)


# ---- baselines and the guess use each rank's CPUs -------------------------------------------

SPACE = {
    "loader.num_workers": IntDistribution(0, 64),
    "loader.prefetch_factor": CategoricalDistribution([1, 2, 4]),
}


def test_one_rank_has_todays_baselines() -> None:
    assert _baselines.initial(SPACE, 8, nproc_per_node=1) == _baselines.initial(SPACE, 8)
    assert [r for _, r in _baselines.initial(SPACE, 8)] == [
        "default",
        "start_small",
        "rule_of_thumb",
    ]


@pytest.mark.parametrize(
    ("cpus", "ranks", "rule", "lightning"),
    [(16, 2, 32, 7), (16, 4, 16, 3), (8, 4, 8, 1), (2, 2, 4, 1), (3, 2, 4, 1)],
)
def test_several_ranks_get_the_per_rank_rule_and_lightnings(
    cpus: int, ranks: int, rule: int, lightning: int
) -> None:
    got = {r: p["loader.num_workers"] for p, r in _baselines.initial(SPACE, cpus, ranks)}
    assert got == {
        Role.DEFAULT: 0,
        Role.START_SMALL: 2,
        Role.RULE_OF_THUMB: rule,
        Role.LIGHTNING: lightning,
    }
    assert _baselines.lightning_workers(cpus, ranks) == lightning


def test_lightnings_equal_to_another_baseline_is_not_repeated() -> None:
    roles = [r for _, r in _baselines.initial(SPACE, 6, 2)]  # 6 // 2 - 1 = 2: start at 2
    assert roles == [Role.DEFAULT, Role.START_SMALL, Role.RULE_OF_THUMB]


def test_the_guess_sees_each_ranks_cpus() -> None:
    # Decoding keeps a core busy: 60 ms of CPU per batch, a 10 ms step. One rank on 8 CPUs
    # hides loading with ceil(60 / 10.5) = 6 workers; with 4 ranks each has 2 CPUs, a floor
    # of 30 ms per batch, and ceil(60 / 31.5) = 2 workers reach it.
    result = default_trial(load_ms=60.0, step_ms=10.0, load_cpu_cores=1.0, usable_cpus=8)
    alone = from_default_trial(result, BUDGET_MB, 64)
    shared = from_default_trial(result, BUDGET_MB, 64, nproc_per_node=4)
    assert alone is not None and shared is not None
    assert from_default_trial(result, BUDGET_MB, 64, nproc_per_node=1) == alone
    assert (alone.workers, alone.bound) == (6, "hides loading")
    assert (shared.workers, shared.bound) == (2, "cpus")


# ---- identity: one rank changes no study name and no trial key -------------------------------


def _without_ranks(cfg: DictConfig) -> DictConfig:
    plain = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(plain, dict)
    del plain["trial"]["nproc_per_node"]
    return OmegaConf.create(plain)


def test_one_rank_keeps_the_study_name(compose: Callable[[Sequence[str]], DictConfig]) -> None:
    cfg = compose([])
    base = to_run_config(cfg)
    before = _sweep_plan._study_name(base, _without_ranks(cfg), {})
    assert _sweep_plan._study_name(base, cfg, {}) == before
    two = compose(["trial.nproc_per_node=2"])
    assert _sweep_plan._study_name(to_run_config(two), two, {}) != before


def test_one_rank_keeps_the_effective_key(compose: Callable[[Sequence[str]], DictConfig]) -> None:
    config: RunConfig = to_run_config(compose([]))
    two = replace(config, trial=replace(config.trial, nproc_per_node=2))
    assert effective_key(config, False) != effective_key(two, False)
    trial = asdict(config.trial)
    del trial["nproc_per_node"]
    assert _trial_identity(config) == trial  # as the key was made before the field existed
    assert _trial_identity(two)["nproc_per_node"] == 2


@pytest.mark.parametrize(("ranks", "cpus", "high"), [(1, 8, 16), (2, 8, 8), (4, 8, 4), (3, 2, 2)])
def test_the_default_workers_range_is_twice_the_cpus_of_each_rank(
    monkeypatch: pytest.MonkeyPatch, ranks: int, cpus: int, high: int
) -> None:
    from hydra import compose, initialize_config_dir

    from loadertune.checks import _resolvers as resolvers
    from loadertune.machine import _host as machine

    monkeypatch.setattr(machine, "usable_cpus", lambda: cpus)
    resolvers.register()
    conf = ROOT / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose(
            "config", overrides=[f"trial.nproc_per_node={ranks}"], return_hydra_config=True
        )
        params = OmegaConf.to_container(cfg.hydra.sweeper.params, resolve=True)
    assert isinstance(params, dict)
    assert params["loader.num_workers"] == f"int(interval(0, {high}))"
