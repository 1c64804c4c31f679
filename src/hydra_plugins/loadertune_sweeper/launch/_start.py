"""Where a sweep starts: check the settings, then fan out over hosts or run the study here."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from loadertune.errors import ConfigError

from ..plan._settings_checks import check_settings
from . import _fanout

if TYPE_CHECKING:
    from hydra.types import HydraContext, TaskFunction
    from omegaconf import DictConfig

    from ..config import SweepSettings


def start(
    settings: SweepSettings,
    hydra_context: HydraContext,
    task_function: TaskFunction,
    config: DictConfig,
    arguments: list[str],
) -> None:
    """Run the sweep: through the launcher on other hosts, or here, one trial at a time."""
    try:
        _fanout.check_settings(settings, config)
        if _fanout.wanted(settings, config):
            check_settings(settings)
    except ConfigError as exc:
        print(f"loadertune: error: {exc}", file=sys.stderr)
        sys.exit(2)
    if _fanout.wanted(settings, config):
        _fanout.fan_out(settings, hydra_context, task_function, config, arguments)
        return
    from ..engine._loop import SweepEngine

    SweepEngine(settings, hydra_context, task_function, config).sweep(arguments)
