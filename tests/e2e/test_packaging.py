"""A regular (non-editable) install carries the configs and the sweeper plugin."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (built,) = out.glob("loadertune-*.whl")
    return built


def test_wheel_holds_configs_and_plugin(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "loadertune/conf/config.yaml" in names
    assert "loadertune/conf/__init__.py" in names
    assert "hydra_plugins/loadertune_sweeper/config.py" in names
    assert not any(n.startswith("hydra_plugins/__init__") for n in names)


def test_installed_wheel_composes_its_configs(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import loadertune, sys; print(loadertune.__file__); "
            "sys.argv=['loadertune', '--cfg', 'job', 'model=mlp']; "
            "from loadertune.cli import main; main()",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    first, _, rest = proc.stdout.partition("\n")
    assert first.startswith(str(target))
    assert "name: mlp" in rest
    assert "num_workers: 0" in rest
