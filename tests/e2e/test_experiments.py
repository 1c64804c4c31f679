"""Named experiments: one word on the command line selects a whole workload preset."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadertune import run_trial
from loadertune.config._typed import SimulatedModelConfig, ThrottledStorageConfig, to_run_config
from tests._cli import run_cli
from tests._sweeps import sweep
from tests.conftest import Compose
from tests.window import assert_whole_window

TOKENS_ON_CPU = [
    "experiment=tokens_gpu",
    "dataset=tokens",
    "model=transformer",
    "trial.device=cpu",
    "dataset.count=5000",
    "dataset.seq_len=32",
    "model.layers=1",
    "model.d_model=24",
    "model.heads=2",
    "loader.batch_size=4",
]


@pytest.mark.parametrize(
    ("name", "storage"), [("imagenet_like_hdd", "hdd"), ("imagenet_like_nfs", "nfs")]
)
def test_imagenet_like_presets(compose: Compose, name: str, storage: str) -> None:
    # model= names the preset's own model, so the tiny sizes for small_cnn are left out.
    raw = compose([f"experiment={name}", "model=simulated"])
    assert raw.dataset.image_size == 40  # the tiny test size given after the preset wins
    config = to_run_config(
        compose([f"experiment={name}", "model=simulated", "dataset.crop_size=24"])
    )
    assert config.storage.name == storage
    assert isinstance(config.storage, ThrottledStorageConfig)
    assert isinstance(config.model, SimulatedModelConfig)
    assert config.model.step_ms == 40.0
    assert_whole_window(run_trial(config), steps=4, batch_size=4)


def test_preset_choices_give_way_to_the_command_line(compose: Compose) -> None:
    config = to_run_config(
        compose(["experiment=imagenet_like_hdd", "model=simulated", "storage=local"])
    )
    assert config.storage.name == "local"


def test_tokens_gpu_preset(compose: Compose) -> None:
    raw = compose(["experiment=tokens_gpu", "dataset=tokens", "model=transformer"])
    assert (raw.dataset.seq_len, raw.model.layers, raw.model.d_model) == (1024, 6, 384)
    assert raw.trial.device == "cuda"
    result = run_trial(to_run_config(compose(TOKENS_ON_CPU)))
    assert_whole_window(result, steps=4, batch_size=4)


@pytest.mark.slow
def test_experiment_is_one_word_on_the_command_line(tmp_path: Path) -> None:
    small = ["dataset.count=48", "dataset.image_size=40", "dataset.crop_size=24"]
    quick = ["loader.batch_size=4", "trial.warmup_steps=1", "trial.steps=4", "model.step_ms=1"]
    args = ["experiment=imagenet_like_nfs", f"paths.output_root={tmp_path}", *small, *quick]
    proc = run_cli(tmp_path, *args, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "dataset=synthetic_images storage=nfs model=simulated" in proc.stdout


@pytest.mark.slow
def test_language_model_preset_as_a_sweep(tmp_path: Path) -> None:
    proc = sweep(tmp_path, *TOKENS_ON_CPU, "hydra.sweeper.n_trials=1", "hydra.sweeper.study_name=t")
    assert proc.returncode == 0, proc.stderr
    assert "[1/1]" in proc.stdout
