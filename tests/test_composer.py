"""The sweep's composer: a trial's job config from its overrides, composed once per overrides."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from hydra_plugins.loadertune_sweeper.plan._sweep_plan import Composer


class _Loader:
    """Hydra's config loader as the composer uses it, counting the compositions asked for."""

    def __init__(self) -> None:
        self.composed: list[list[str]] = []

    def load_sweep_config(self, master: DictConfig, overrides: list[str]) -> DictConfig:
        self.composed.append(list(overrides))
        cfg = OmegaConf.create({"loader": {"num_workers": len(overrides)}, "hydra": {"job": {}}})
        OmegaConf.set_struct(cfg, True)
        return cfg


def _composer() -> tuple[Composer, _Loader]:
    loader = _Loader()
    context: Any = type("Context", (), {"config_loader": loader})()
    return Composer(context, OmegaConf.create({})), loader


def test_the_same_overrides_are_composed_once_and_each_trial_gets_its_own_config() -> None:
    compose, loader = _composer()
    first = compose(["loader.num_workers=2"], job_num=3)
    again = compose(["loader.num_workers=2"], job_num=7)
    assert loader.composed == [["loader.num_workers=2"]]
    assert (first.hydra.job.num, again.hydra.job.num) == (3, 7)
    assert (first.hydra.job.id, again.hydra.job.id) == ("3", "7")
    again.loader.num_workers = 4  # a trial's change stays its own
    assert compose(["loader.num_workers=2"], job_num=9).loader.num_workers == 1
    assert OmegaConf.is_struct(first)  # the copy keeps Hydra's flags
    compose(["loader.num_workers=1", "loader.prefetch_factor=2"], job_num=10)
    assert len(loader.composed) == 2


def test_the_composer_keeps_only_the_newest_overrides() -> None:
    compose, loader = _composer()
    lines = [[f"loader.num_workers={n}"] for n in range(Composer.KEPT + 1)]
    for n, overrides in enumerate(lines):
        compose(overrides, job_num=n)
    compose(lines[-1], job_num=99)  # kept: the newest
    assert len(loader.composed) == Composer.KEPT + 1
    compose(lines[0], job_num=100)  # the oldest went first: composed again
    assert len(loader.composed) == Composer.KEPT + 2
