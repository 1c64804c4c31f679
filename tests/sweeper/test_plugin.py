"""The sweeper's pieces: plugin discovery, conditional suggestions, override rendering."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from hydra_plugins.loadertune_sweeper.plan._sweep_plan import render, suggest
from loadertune.config._search_rules import applies, suggestion_order

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_plugin_is_discovered_by_hydra() -> None:
    names = {p.__name__ for p in Plugins.instance().discover(Sweeper)}
    assert "LoadertuneSweeper" in names


SPACE = {
    "loader.prefetch_factor": CategoricalDistribution([1, 2, 4]),
    "loader.pin_memory": CategoricalDistribution([True, False]),
    "loader.num_workers": IntDistribution(0, 3),
}


class _Plan:
    def __init__(self, accelerator: bool) -> None:
        self.space = SPACE
        self.fixed: dict[str, str] = {}
        self.accelerator = accelerator
        self.default_workers = 0


@pytest.mark.parametrize(
    ("workers", "accelerator", "expected"),
    [
        (0, False, {"loader.num_workers"}),
        (2, False, {"loader.num_workers", "loader.prefetch_factor"}),
        (0, True, {"loader.num_workers", "loader.pin_memory"}),
        (3, True, {"loader.num_workers", "loader.prefetch_factor", "loader.pin_memory"}),
    ],
)
def test_conditional_parameters_are_suggested_only_where_they_act(
    workers: int, accelerator: bool, expected: set[str]
) -> None:
    study = optuna.create_study()
    study.enqueue_trial({"loader.num_workers": workers})
    values = suggest(study.ask(), _Plan(accelerator))  # type: ignore[arg-type]
    assert set(values) == expected
    assert values["loader.num_workers"] == workers


def test_num_workers_is_suggested_first() -> None:
    assert suggestion_order(list(SPACE))[0] == "loader.num_workers"
    assert suggestion_order(["+loader.num_workers", "a"])[0] == "+loader.num_workers"


@pytest.mark.parametrize(
    ("key", "workers", "accelerator", "expected"),
    [
        ("loader.persistent_workers", 0, True, False),
        ("+loader.multiprocessing_context", 1, False, True),
        ("loader.non_blocking", 4, False, False),
        ("loader.batch_size", 0, False, True),
    ],
)
def test_applies(key: str, workers: int, accelerator: bool, expected: bool) -> None:
    assert applies(key, workers, accelerator) is expected


@pytest.mark.parametrize(
    "value", [None, True, False, 3, 0.5, "fork", "a b", "x'y", "1", "null", "[1,2]"]
)
def test_render_round_trips_through_hydra(value: object) -> None:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_override(f"k={render(value)}").value()
    assert parsed == value
    assert type(parsed) is type(value)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["-m", "hydra.sweeper.params.loader.num_workers=int(interval(0,4))"],
            ["-m", "loader.num_workers=int(interval(0,4))"],
        ),
        (
            ["--multirun", "+hydra.sweeper.params.loader.x=choice(1,2)", "a=1"],
            ["--multirun", "+loader.x=choice(1,2)", "a=1"],
        ),
        (
            ["hydra.sweeper.params.loader.num_workers=3"],
            ["hydra.sweeper.params.loader.num_workers=3"],
        ),
        (["-m", "hydra.sweeper.n_trials=3"], ["-m", "hydra.sweeper.n_trials=3"]),
        (["-m", "hydra.sweeper.sampler=grid"], ["-m", "hydra/sweeper/sampler=grid"]),
        (["hydra.sweeper.pruner=none"], ["hydra/sweeper/pruner=none"]),
        (["-m", "hydra.sweeper.sampler.seed=3"], ["-m", "hydra.sweeper.sampler.seed=3"]),
    ],
)
def test_sweeper_params_on_the_command_line_become_sweep_overrides(
    argv: list[str], expected: list[str]
) -> None:
    from loadertune.cli import sweeper_shortcuts

    assert sweeper_shortcuts(argv) == expected


@pytest.mark.parametrize("exists", [True, False])
def test_exported_configs_join_the_search_path_only_when_present(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exists: bool
) -> None:
    from hydra._internal.utils import create_config_search_path

    monkeypatch.chdir(tmp_path)
    if exists:
        (tmp_path / "outputs" / "conf" / "loader").mkdir(parents=True)
    ours = [p.path for p in create_config_search_path("pkg://loadertune/conf").get_path()]
    other = [p.path for p in create_config_search_path("pkg://someone_else/conf").get_path()]
    assert (f"file://{tmp_path}/outputs/conf" in ours) is exists
    assert not any("outputs/conf" in p for p in other)


@pytest.mark.parametrize(
    ("space", "count"),
    [
        # 0 workers takes no prefetch_factor: 1 + 2 x 4 distinct settings.
        (
            {
                "loader.num_workers": IntDistribution(0, 2),
                "loader.prefetch_factor": CategoricalDistribution([1, 2, 4, 8]),
            },
            9,
        ),
        ({"loader.num_workers": IntDistribution(0, 8, step=2)}, 5),
        ({"loader.batch_size": FloatDistribution(1.0, 2.0)}, None),  # not finite
    ],
)
def test_the_number_of_distinct_settings_in_a_space(
    space: dict[str, Any], count: int | None
) -> None:
    from hydra_plugins.loadertune_sweeper.plan._sweep_plan import SweepPlan

    plan = SweepPlan(space, {}, None, False, "", "", Path("."))  # type: ignore[arg-type]
    assert plan.setting_count() == count
