"""Where a sweep starts: check the settings, then fan out over hosts or run the study here."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from loadertune.errors import ConfigError, status_of

from ..engine._loop import SweepEngine
from ..plan._settings_checks import sweep_settings
from . import _fanout

if TYPE_CHECKING:
    from hydra.types import HydraContext, TaskFunction
    from omegaconf import DictConfig


def start(
    raw: Mapping[str, Any],
    hydra_context: HydraContext,
    task_function: TaskFunction,
    config: DictConfig,
    arguments: list[str],
) -> None:
    """Run the sweep: through the launcher on other hosts, or here, one trial at a time.

    ``raw`` is the ``hydra.sweeper`` node as Hydra composed it; a setting that cannot work
    ends the command here, in one line naming the key, with exit status 2.
    """
    try:
        settings = sweep_settings(raw)
        _fanout.check_scale_out(settings, config)
    except ConfigError as exc:
        print(f"loadertune: error: {exc}", file=sys.stderr)
        sys.exit(status_of(exc))
    if _fanout.wanted(settings, config):
        _fanout.fan_out(settings, hydra_context, task_function, config, arguments)
        return

    SweepEngine(settings, hydra_context, task_function, config).sweep(arguments)
