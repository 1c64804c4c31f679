"""The real conf/ composes into typed config; bad values become one-line errors naming the key."""

from __future__ import annotations

import pytest

from loadertune.checks._validation import validate
from loadertune.config._typed import (
    CustomDatasetConfig,
    ImageFolderConfig,
    MLPConfig,
    SimulatedModelConfig,
    SmallCNNConfig,
    SyntheticImagesConfig,
    to_run_config,
)
from loadertune.errors import ConfigError
from tests.conftest import Compose


def test_defaults_compose_to_typed_config(compose: Compose) -> None:
    config = to_run_config(compose([]))
    assert isinstance(config.dataset, SyntheticImagesConfig)
    assert isinstance(config.model, SmallCNNConfig)
    assert config.loader.num_workers == 0
    assert config.loader.batch_size == 4
    assert config.storage.name == "local"
    assert config.paths.dataset_cache.endswith("/datasets")


@pytest.mark.parametrize(
    ("overrides", "kind"),
    [
        (["model=simulated"], SimulatedModelConfig),
        (["model=mlp"], MLPConfig),
        (["model=small_cnn"], SmallCNNConfig),
    ],
)
def test_every_model_option_composes(compose: Compose, overrides: list[str], kind: type) -> None:
    assert isinstance(to_run_config(compose(overrides)).model, kind)


def test_custom_dataset_passes_extra_keys_as_kwargs(compose: Compose) -> None:
    cfg = compose(["dataset=custom", "dataset._target_=a.B", "+dataset.root=/data", "+dataset.n=3"])
    ds = to_run_config(cfg).dataset
    assert isinstance(ds, CustomDatasetConfig)
    assert ds.target == "a.B"
    assert ds.kwargs == {"root": "/data", "n": 3}


def test_image_folder_needs_root(compose: Compose) -> None:
    with pytest.raises(ConfigError, match=r"^dataset\.root=\?\?\?: is required"):
        to_run_config(compose(["dataset=image_folder"]))


@pytest.mark.parametrize(
    ("overrides", "prefix"),
    [
        (["loader.num_workers=abc"], "loader.num_workers=abc"),
        (
            ["loader.batch_size=true"],
            "loader.batch_size=true: value 'True' of type 'bool' is not of type int",
        ),
        (["+loader.workers=2"], "loader.workers=2: is not a known key"),
        (["model.step_ms=fast", "model=simulated"], "model.step_ms=fast"),
        (["dataset=custom"], "dataset._target_=???"),
    ],
)
def test_type_errors_name_the_full_key(compose: Compose, overrides: list[str], prefix: str) -> None:
    with pytest.raises(ConfigError) as info:
        to_run_config(compose(overrides))
    assert str(info.value).startswith(prefix)
    assert "Fix: " in str(info.value)


def test_missing_dataset_root_is_refused(compose: Compose, tmp_path: object) -> None:
    config = to_run_config(compose(["dataset=image_folder", "dataset.root=/no/such/dir"]))
    assert isinstance(config.dataset, ImageFolderConfig)
    with pytest.raises(ConfigError, match=r"^dataset\.root=/no/such/dir: is not an existing"):
        validate(config)


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        ("no_such_pkg.Data", "cannot be imported"),
        ("loadertune.NoSuchClass", "has no class NoSuchClass"),
        ("Data", "not a dotted path"),
    ],
)
def test_custom_target_that_does_not_import(compose: Compose, target: str, problem: str) -> None:
    config = to_run_config(compose(["dataset=custom", f"dataset._target_={target}"]))
    with pytest.raises(ConfigError, match=problem) as info:
        validate(config)
    assert str(info.value).startswith(f"dataset._target_={target}")
