"""Every bad loader/trial value is refused before anything starts, naming the key and a fix."""

from __future__ import annotations

from dataclasses import replace

import pytest

from loadertune.checks._validation import validate_loader, validate_trial
from loadertune.config._typed import LoaderConfig, TrialConfig
from loadertune.errors import ConfigError

BAD_LOADERS = [
    ({"num_workers": -1}, "loader.num_workers=-1", "integer >= 0"),
    ({"num_workers": True}, "loader.num_workers=true", "integer >= 0"),
    ({"prefetch_factor": 4}, "loader.prefetch_factor=4", "needs loader.num_workers > 0"),
    ({"prefetch_factor": 0, "num_workers": 2}, "loader.prefetch_factor=0", ">= 1"),
    ({"persistent_workers": True}, "loader.persistent_workers=true", "needs loader.num_workers"),
    ({"batch_size": 0}, "loader.batch_size=0", "positive integer"),
    ({"batch_size": -3}, "loader.batch_size=-3", "positive integer"),
    ({"batch_size": None}, "loader.batch_size=null", "positive integer"),
    ({"batch_size": True}, "loader.batch_size=true", "positive integer"),
    (
        {"multiprocessing_context": "threads", "num_workers": 1},
        "loader.multiprocessing_context=threads",
        "start method",
    ),
    (
        {"multiprocessing_context": "spawn"},
        "loader.multiprocessing_context=spawn",
        "needs loader.num_workers > 0",
    ),
]


@pytest.mark.parametrize(("change", "prefix", "problem"), BAD_LOADERS)
def test_bad_loader_settings_name_key_and_fix(
    change: dict[str, object], prefix: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as info:
        validate_loader(replace(LoaderConfig(), **change))  # type: ignore[arg-type]
    message = str(info.value)
    assert message.startswith(prefix)
    assert problem in message
    assert "Fix: " in message
    assert "\n" not in message


GOOD_LOADERS = [
    {},
    {"num_workers": 2, "prefetch_factor": 4, "persistent_workers": True},
    {"num_workers": 1, "multiprocessing_context": "spawn"},
    {"batch_size": 1},
]


@pytest.mark.parametrize("change", GOOD_LOADERS)
def test_good_loader_settings_pass(change: dict[str, object]) -> None:
    validate_loader(replace(LoaderConfig(), **change))  # type: ignore[arg-type]


BAD_TRIALS = [
    ({"steps": 0}, "trial.steps=0"),
    ({"warmup_steps": -1}, "trial.warmup_steps=-1"),
    ({"time_limit_s": 0.0}, "trial.time_limit_s=0.0"),
    ({"sample_hz": 0.0}, "trial.sample_hz=0.0"),
    ({"torch_threads": 0}, "trial.torch_threads=0"),
    ({"device": "tpu"}, "trial.device=tpu"),
]


@pytest.mark.parametrize(("change", "prefix"), BAD_TRIALS)
def test_bad_trial_settings_name_key(change: dict[str, object], prefix: str) -> None:
    with pytest.raises(ConfigError, match="Fix: ") as info:
        validate_trial(replace(TrialConfig(), **change))  # type: ignore[arg-type]
    assert str(info.value).startswith(prefix)
