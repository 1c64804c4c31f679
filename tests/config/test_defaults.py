"""One default per key: the YAML in ``conf/`` (the documentation users read) and the schemas.

``conf/`` is the source of truth; the dataclasses that type it (``loadertune.config._typed`` for a
trial, ``SweepSettings`` for ``hydra.sweeper``) must hold the same defaults, so a library user
who builds one in Python, and the YAML a person reads, never disagree. Each check composes the
real configs through Hydra and compares key by key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.loadertune_sweeper import config as sweeper_config
from hydra_plugins.loadertune_sweeper.config import SweepSettings
from loadertune.checks import _resolvers as resolvers
from loadertune.config import _typed as run_config
from tests.conftest import CONF

resolvers.register()

# Presets of the throttled device: their own values on the throttled schema, by design.
PRESETS = {"hdd", "nfs", "object_store"}
# The sweeper's keys whose YAML value is not the schema's default, each for a reason:
# sampler and pruner are config groups (chosen by the schema's defaults list, checked below);
# params is the default study's space, written once in the YAML (it needs loadertune's
# resolver, which the schema cannot assume).
SWEEPER_OWN_YAML = {"sampler", "pruner", "params"}


def schema_defaults(schema: type[Any]) -> dict[str, Any]:
    """Each field's default (``???`` where it has none)."""
    out = {}
    for f in dataclasses.fields(schema):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
        else:
            out[f.name] = "???"
    return out


def same(yaml_value: Any, schema_value: Any) -> bool:
    """Equal as values, and a bool only ever equal to a bool (``1 == True`` in Python)."""
    if isinstance(yaml_value, bool) or isinstance(schema_value, bool):
        return type(yaml_value) is type(schema_value) and yaml_value == schema_value
    return bool(yaml_value == schema_value)


def composed(*overrides: str, hydra: bool = False) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=hydra)


def group_options() -> Iterator[tuple[str, str, type[Any]]]:
    """(group, option, schema) for every YAML option of the groups with one schema each."""
    tables = {
        "dataset": run_config.DATASETS,
        "model": run_config.MODELS,
        "storage": run_config.STORAGES,
    }
    for group, table in tables.items():
        files = sorted(p.stem for p in (CONF / group).glob("*.yaml"))
        assert files == sorted(table), f"conf/{group}/ and the schema table differ"
        for option in files:
            yield group, option, table[option]
    simple = {
        "loader": run_config.LoaderConfig,
        "trial": run_config.TrialConfig,
        "tracking": run_config.TrackingConfig,
    }
    for group, schema in simple.items():
        (option,) = [p.stem for p in (CONF / group).glob("*.yaml")]
        yield group, option, schema


@pytest.mark.parametrize(
    ("group", "option", "schema"),
    list(group_options()),
    ids=[f"{g}={o}" for g, o, _ in group_options()],
)
def test_every_yaml_default_is_the_schemas(group: str, option: str, schema: type[Any]) -> None:
    node = OmegaConf.to_container(composed(f"{group}={option}")[group], resolve=True)
    assert isinstance(node, dict)
    defaults = schema_defaults(schema)
    if option == "custom":  # the YAML's _target_ is the schema's target; the rest are kwargs
        defaults = {"name": defaults["name"], "_target_": defaults["target"]}
    if option in PRESETS:
        assert set(node) == set(defaults), f"conf/{group}/{option}.yaml keys"
        return
    assert set(node) == set(defaults), f"conf/{group}/{option}.yaml lists every key, no other"
    wrong = {k: (node[k], defaults[k]) for k in node if not same(node[k], defaults[k])}
    assert not wrong, f"conf/{group}/{option}.yaml (yaml, schema): {wrong}"


def test_paths_defaults_are_the_schemas() -> None:
    node = OmegaConf.to_container(composed().paths, resolve=True)
    assert node == schema_defaults(run_config.PathsConfig)


def test_every_sweeper_yaml_default_is_the_schemas() -> None:
    written = OmegaConf.load(CONF / "config.yaml").hydra.sweeper  # what the file itself says
    defaults = schema_defaults(SweepSettings)
    groups = {"sampler", "pruner"}  # written only where the YAML sets one of their options
    assert set(written) | groups == set(defaults), "conf/config.yaml lists every hydra.sweeper key"
    node = OmegaConf.to_container(composed(hydra=True).hydra.sweeper, resolve=False)
    assert isinstance(node, dict)
    wrong = {
        k: (node[k], v)
        for k, v in defaults.items()
        if k not in SWEEPER_OWN_YAML and not same(node[k], v)
    }
    assert not wrong, f"hydra.sweeper (conf/config.yaml, SweepSettings): {wrong}"


def test_the_sweepers_sampler_and_pruner_are_the_yamls() -> None:
    choices = composed(hydra=True).hydra.runtime.choices
    schema = {k: v for d in sweeper_config.defaults if isinstance(d, dict) for k, v in d.items()}
    assert choices["hydra/sweeper/sampler"] == schema["sampler"]
    assert choices["hydra/sweeper/pruner"] == schema["pruner"]
