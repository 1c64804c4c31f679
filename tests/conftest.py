"""Shared fixtures: the real conf/ composed and shrunk to tiny sizes, in a temporary outputs/."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from omegaconf import DictConfig

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
FIXTURES = Path(__file__).resolve().parent / "fixtures_pkg"

# Sizes that keep a real trial (real files, real workers, real model step) under a few seconds.
TINY = [
    "dataset.count=48",
    "dataset.image_size=40",
    "dataset.crop_size=32",
    "dataset.num_classes=3",
    "loader.batch_size=4",
    "trial.warmup_steps=1",
    "trial.steps=4",
    "model.channels=4",
]


@pytest.fixture
def compose(tmp_path: Path) -> Callable[[Sequence[str]], DictConfig]:
    """Compose the real ``conf/`` with the tiny sizes, writing under ``tmp_path``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    def _compose(overrides: Sequence[str] = ()) -> DictConfig:
        base = [*TINY, f"paths.output_root={tmp_path}", "tracking.enabled=false"]
        # Group choices (model=..., dataset=...) must come before keys they hold.
        groups = [o for o in overrides if "." not in o.split("=")[0]]
        rest = [o for o in overrides if o not in groups]
        if any(o.startswith("model=") and "small_cnn" not in o for o in groups):
            base.remove("model.channels=4")
        if any(o.startswith("dataset=") and "synthetic" not in o for o in groups):
            base = [b for b in base if not b.startswith("dataset.")]
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return hydra_compose("config", overrides=[*groups, *base, *rest])

    return _compose


@pytest.fixture
def fixtures_on_path(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put tests/fixtures_pkg on sys.path and PYTHONPATH (a package outside loadertune)."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FIXTURES), *sys.path]))
    return FIXTURES
