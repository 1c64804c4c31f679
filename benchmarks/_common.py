"""Compose the real conf/ into a RunConfig for benchmark scripts (outputs/ under the repo)."""

from __future__ import annotations

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
