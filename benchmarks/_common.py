"""Compose the real conf/ into a RunConfig for benchmark scripts (outputs/ under the repo)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def compose_run_config(overrides: Sequence[str]) -> Any:
    """The RunConfig ``loadertune <overrides>`` would run, with tracking off."""
    from hydra import compose, initialize_config_dir

    from loadertune import resolvers
    from loadertune.config import to_run_config

    resolvers.register()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                f"paths.output_root={ROOT / 'outputs'}",
                "tracking.enabled=false",
                *overrides,
            ],
        )
    return to_run_config(cfg)


def multirun(out: Path, args: Sequence[str]) -> tuple[subprocess.CompletedProcess[str], float]:
    """``loadertune -m paths.output_root=<out> <args>`` run in ``out``, and its wall time (s)."""
    script = str(Path(sys.executable).with_name("loadertune"))
    start = time.perf_counter()
    proc = subprocess.run(
        [script, "-m", f"paths.output_root={out}", *args],
        capture_output=True,
        text=True,
        cwd=out,
    )
    return proc, time.perf_counter() - start
