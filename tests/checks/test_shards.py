"""A sweep's num_workers range capped at a streaming dataset's shards per rank."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from optuna.distributions import CategoricalDistribution, IntDistribution

from hydra_plugins.loadertune_sweeper.plan._sweep_plan import cap_range
from loadertune.checks._preflight import WorkerCap
from loadertune.checks._shards import shard_limit
from loadertune.config._typed import RunConfig, to_run_config


def _cap_at_shards(space: dict[str, Any], base: RunConfig) -> int | None:
    """The range capped as a sweep's plan caps it; the shards per rank where they stop it."""
    cap: WorkerCap = cap_range(space, base.trial.nproc_per_node, shard_limit(base))
    return cap.workers if cap.by == "shards" else None


def _base(tmp_path: Path, **trial: object) -> RunConfig:
    return to_run_config(
        {
            "dataset": {"name": "webdataset", "shards": 6},
            "model": {"name": "simulated"},
            "storage": {"name": "local"},
            "trial": dict(trial),
            "paths": {"output_root": str(tmp_path)},
        }
    )


def test_an_interval_stops_at_the_shards_per_rank_on_its_step(tmp_path: Path) -> None:
    space = {"loader.num_workers": IntDistribution(0, 16, step=4)}
    assert _cap_at_shards(space, _base(tmp_path)) == 6
    assert space["loader.num_workers"] == IntDistribution(0, 4, step=4)
    space = {"loader.num_workers": IntDistribution(1, 16)}
    assert _cap_at_shards(space, _base(tmp_path, nproc_per_node=2)) == 3
    assert space["loader.num_workers"] == IntDistribution(1, 3)


def test_a_choice_keeps_the_values_within_the_shards(tmp_path: Path) -> None:
    space = {"loader.num_workers": CategoricalDistribution([0, 2, 4, 8, 16])}
    _cap_at_shards(space, _base(tmp_path))
    assert space["loader.num_workers"] == CategoricalDistribution([0, 2, 4])


def test_a_map_style_dataset_keeps_its_range(tmp_path: Path) -> None:
    config = to_run_config(
        {
            "dataset": {"name": "synthetic_images"},
            "model": {"name": "simulated"},
            "storage": {"name": "local"},
            "paths": {"output_root": str(tmp_path)},
        }
    )
    space = {"loader.num_workers": IntDistribution(0, 16)}
    assert _cap_at_shards(space, config) is None
    assert space["loader.num_workers"] == IntDistribution(0, 16)
