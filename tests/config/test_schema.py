"""Every numeric key of every schema refuses ``nan``, ``inf`` and ``-inf`` in one line naming the
key: ``nan`` fails every comparison, so it would pass each ``> 0`` check after it, and an
infinite limit turns a guard off. The keys are read from the schemas, so a new one is covered."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterator
from typing import Any

import pytest

from loadertune.config import check_finite
from loadertune.config._typed import (
    DATASETS,
    MODELS,
    STORAGES,
    LoaderConfig,
    PathsConfig,
    TrackingConfig,
    TrialConfig,
    to_run_config,
)
from loadertune.errors import ConfigError
from tests.conftest import CONF, Compose

BAD = ("nan", "inf", "-inf")
SIMPLE = {"loader": LoaderConfig, "trial": TrialConfig, "tracking": TrackingConfig}


def _float_fields(schema: type[Any]) -> list[str]:
    return [f.name for f in dataclasses.fields(schema) if "float" in str(f.type)]


def float_keys() -> Iterator[tuple[list[str], str]]:
    """(the options to compose, the dotted key) for every float key of every shipped option."""
    for group, table in (("dataset", DATASETS), ("model", MODELS), ("storage", STORAGES)):
        for option, schema in table.items():
            shipped = (CONF / group / f"{option}.yaml").is_file()
            if shipped and option not in ("custom", "image_folder"):  # these need a path
                for name in _float_fields(schema):
                    yield [f"{group}={option}"], f"{group}.{name}"
    for group, schema in SIMPLE.items():
        for name in _float_fields(schema):
            yield [], f"{group}.{name}"
    assert not _float_fields(PathsConfig)


KEYS = list(float_keys())


def test_the_table_holds_the_keys_the_probe_found() -> None:
    keys = {key for _, key in KEYS}
    assert {"trial.time_limit_s", "trial.memory_budget_mb", "model.step_ms"} <= keys
    assert len(keys) >= 10


@pytest.mark.parametrize(("options", "key"), KEYS, ids=[f"{o}{k}" for o, k in KEYS])
def test_every_float_key_refuses_a_number_that_is_not_finite(
    compose: Compose, options: list[str], key: str
) -> None:
    for bad in BAD:
        with pytest.raises(ConfigError) as info:
            to_run_config(compose([*options, f"{key}={bad}"]))  # a real override, composed
        message = str(info.value)
        assert message.startswith(f"{key}={bad}: is not a finite number. Fix: give {key} a fin")
        assert "\n" not in message


def test_finite_numbers_and_null_pass(compose: Compose) -> None:
    config = to_run_config(compose(["trial.memory_budget_mb=512.5", "trial.precision=null"]))
    assert config.trial.memory_budget_mb == 512.5 and config.trial.precision is None


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ({"a": [1.0, math.nan]}, "k.a[1]"),
        ({"a": {"b": -math.inf}}, "k.a.b"),
        (TrialConfig(time_limit_s=math.inf), "k.time_limit_s"),
    ],
)
def test_a_number_deep_inside_is_named_by_its_full_key(value: Any, named: str) -> None:
    with pytest.raises(ConfigError, match="^" + re.escape(f"{named}=")):
        check_finite("k", value, "conf/")
