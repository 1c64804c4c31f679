"""Shared fixtures: the real conf/ composed and shrunk to tiny sizes, in a temporary outputs/."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

import pytest
from omegaconf import DictConfig

from loadertune.checks import _host_lock as host_lock

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


def pytest_configure(config: pytest.Config) -> None:
    """Subprocesses see the environment of a plain ``make test``: pytest-xdist's workers set
    ``COLUMNS=80``, which would make a sweep's console fold its tables and paragraphs.

    And this test process (each pytest-xdist worker: this runs in every one) gets its own
    host timing lock, set before any fixture runs, module- and session-scoped ones too (the
    shared review sweep): a sweep elsewhere on this machine, or another test run beside this
    one, never makes a test wait. A test's subprocesses inherit it; tests of the lock itself
    pass a folder of their own.
    """
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)
    folder = tempfile.mkdtemp(prefix="loadertune-test-lock-")
    os.environ[host_lock.ENV_DIR] = folder
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


def with_tiny(overrides: Sequence[str]) -> list[str]:
    """``overrides`` after the tiny sizes that apply to the dataset and model they choose."""
    base = list(TINY)
    if any(o.startswith("model=") and o != "model=small_cnn" for o in overrides):
        base.remove("model.channels=4")
    if any(o.startswith("dataset=") and o != "dataset=synthetic_images" for o in overrides):
        base = [b for b in base if not b.startswith("dataset.")]
    return [*base, *overrides]


Compose = Callable[[Sequence[str]], DictConfig]  # the ``compose`` fixture's type


@pytest.fixture
def compose(tmp_path: Path) -> Compose:
    """Compose the real ``conf/`` with the tiny sizes, writing under ``tmp_path``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    def _compose(overrides: Sequence[str] = ()) -> DictConfig:
        base = [f"paths.output_root={tmp_path}", "tracking.enabled=false"]
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return hydra_compose("config", overrides=[*base, *with_tiny(overrides)])

    return _compose


@pytest.fixture
def fixtures_on_path(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put tests/fixtures_pkg on sys.path and PYTHONPATH (a package outside loadertune)."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FIXTURES), *sys.path]))
    return FIXTURES


def lacking(why: str) -> NoReturn:
    """A capability this machine lacks (root, ``unshare``, a tmpfs mount): skip here, but
    fail under CI (``CI`` set), which runs as root with the dev extras: there a missing
    capability is a broken set-up, and a skip would hide the feature it tests."""
    if os.environ.get("CI"):
        pytest.fail(f"CI must run this test, but: {why}")
    pytest.skip(why)
