"""``make gpu-check`` exists and, where no CUDA device is visible, says so and exits 0."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT


def test_gpu_check_without_a_device_says_so_and_passes() -> None:
    assert "\ngpu-check: setup\n" in (ROOT / "Makefile").read_text()
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no device, even on a GPU machine
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py")],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("gpu-check: no CUDA device")
