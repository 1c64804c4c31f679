"""The sweep's composer: a trial's job config from its overrides, composed once per overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from hydra_plugins.loadertune_sweeper.plan._sweep_plan import Composer


class _Loader:
    """Hydra's config loader as the composer uses it, counting the compositions asked for."""

    def __init__(self) -> None:
        self.composed: list[list[str]] = []

    def load_sweep_config(self, master: DictConfig, overrides: list[str]) -> DictConfig:
        self.composed.append(list(overrides))
        hydra = {"job": {}, "sweep": {"subdir": "0"}, "overrides": {"hydra": []}}
        cfg = OmegaConf.create({"loader": {"num_workers": len(overrides)}, "hydra": hydra})
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


def test_a_verdict_round_s_own_folder_gives_what_hydra_composes(tmp_path: Path) -> None:
    """Each verdict round names its folder; the round's config is Hydra's own composition."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import HydraContext, RunMode

    from tests.conftest import CONF

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration(
            "config", [f"paths.output_root={tmp_path}"], RunMode.MULTIRUN
        )
        compose = Composer(HydraContext(config_loader=loader, callbacks=None), master)
        spy = _Loader()
        lines = ["loader.num_workers=2", "trial.precision=null"]
        rounds = [compose([*lines, f"hydra.sweep.subdir=verdict/{r}-3"], job_num=3) for r in (0, 1)]
        for r, cfg in enumerate(rounds):
            hydra = loader.load_sweep_config(master, [*lines, f"hydra.sweep.subdir=verdict/{r}-3"])
            with open_dict(hydra):
                hydra.hydra.job.id, hydra.hydra.job.num = "3", 3
            assert OmegaConf.to_container(cfg) == OmegaConf.to_container(hydra)
            assert cfg.hydra.sweep.subdir == f"verdict/{r}-3"
        context: Any = type("Context", (), {"config_loader": spy})()
        counted = Composer(context, master)
        for r in range(3):
            counted([*lines, f"hydra.sweep.subdir=verdict/{r}-3"], job_num=3)
        assert len(spy.composed) == 1  # every round of a setting: one composition
