"""Bad input across the whole CLI: every typed key of every config option, and the ranges.

Each bad value must give one line naming the key (and a fix), before anything starts.
Wrong types are generated for every leaf key of every option of every group; range errors
(negative, zero, nonsense strings, missing paths) come from a table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf

from loadertune.config import to_run_config
from loadertune.errors import ConfigError
from loadertune.validation import validate

from .conftest import CONF

Compose = Callable[[Sequence[str]], DictConfig]
GROUPS = ("dataset", "storage", "model", "loader", "trial", "tracking")
# Keys whose value is free text or free-form by design.
FREE = {
    "dataset.name",
    "storage.name",
    "model.name",
    "tracking.experiment",
    "tracking.run_name",
    "tracking.tracking_uri",
    "trial.device",
    "loader.multiprocessing_context",
    "dataset.root",
    "storage.root",
    "storage.path",
}


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def typed_leaves(compose: Compose) -> Iterator[tuple[str, str, object]]:
    """(group option, dotted key, default value) for every typed leaf of every option."""
    for group in GROUPS:
        for option in options(group):
            if group == "dataset" and option in ("custom", "image_folder"):
                continue
            cfg = compose([f"{group}={option}"])
            node = OmegaConf.to_container(cfg[group], resolve=True)
            assert isinstance(node, dict)
            for key, value in node.items():
                full = f"{group}.{key}"
                if full in FREE or isinstance(value, dict | list):
                    continue
                if isinstance(value, bool | int | float):
                    yield f"{group}={option}", full, value


def test_every_typed_key_rejects_a_wrong_type(compose: Compose) -> None:
    checked = 0
    for choice, key, default in typed_leaves(compose):
        bad = "yes_please" if not isinstance(default, bool) else "maybe"
        try:
            config = to_run_config(compose([choice, f"{key}={bad}"]))
            validate(config)
        except ConfigError as exc:
            message = str(exc)
            assert message.startswith(f"{key}="), (choice, key, message)
            assert "\n" not in message
            assert "Fix: " in message
            checked += 1
            continue
        raise AssertionError(f"{choice} {key}={bad} was accepted")
    assert checked >= 30


RANGES = [
    (["loader.batch_size=0"], "loader.batch_size=0"),
    (["loader.batch_size=-8"], "loader.batch_size=-8"),
    (["loader.num_workers=-1"], "loader.num_workers=-1"),
    (["loader.num_workers=2", "loader.prefetch_factor=0"], "loader.prefetch_factor=0"),
    (
        ["loader.multiprocessing_context=threads", "loader.num_workers=1"],
        "loader.multiprocessing_context=threads",
    ),
    (["trial.steps=0"], "trial.steps=0"),
    (["trial.warmup_steps=-1"], "trial.warmup_steps=-1"),
    (["trial.time_limit_s=-3"], "trial.time_limit_s=-3"),
    (["trial.sample_hz=0"], "trial.sample_hz=0"),
    (["trial.device=quantum"], "trial.device=quantum"),
    (["trial.torch_threads=0"], "trial.torch_threads=0"),
    (["dataset.count=0"], "dataset.count=0"),
    (["dataset.image_size=0"], "dataset.image_size=0"),
    (["dataset.crop_size=-1"], "dataset.crop_size=-1"),
    (["dataset.quality=0"], "dataset.quality=0"),
    (["dataset.num_classes=0"], "dataset.num_classes=0"),
    (["dataset=image_folder", "dataset.root=/no/such/folder"], "dataset.root=/no/such/folder"),
    (["dataset=custom", "dataset._target_=not_a_module.Data"], "dataset._target_="),
    (["model=simulated", "model.step_ms=-5"], "model.step_ms=-5"),
    (["model=mlp", "model.hidden=0"], "model.hidden=0"),
    (["model=mlp", "model.layers=-1"], "model.layers=-1"),
    (["model=small_cnn", "model.channels=0"], "model.channels=0"),
    (["model=mlp", "model.lr=-0.1"], "model.lr=-0.1"),
]


@pytest.mark.parametrize(("overrides", "prefix"), RANGES)
def test_out_of_range_values_name_the_key(
    compose: Compose, overrides: list[str], prefix: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as info:
        validate(to_run_config(compose(overrides)))
    message = str(info.value)
    assert message.startswith(prefix), message
    assert "Fix: " in message
    assert not (tmp_path / "mlflow.db").exists()
