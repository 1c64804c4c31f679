"""The Hydra sweeper ``hydra/sweeper=loadertune``: an Optuna study over loader settings.

This module is imported at every Hydra start, so it stays light: the engine (Optuna, MLflow,
torch) starts in ``launch.start``, whose room is imported only when a sweep runs.
"""

from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from . import launch
from .config import SWEEPER_NODE  # noqa: F401  (registers the schemas)


class LoadertuneSweeper(Sweeper):
    """Ask Optuna for settings, run each trial in its own process, record it in MLflow."""

    def __init__(self, **settings: Any) -> None:
        self._settings: dict[str, Any] = {
            k: OmegaConf.to_container(v, resolve=True) if isinstance(v, DictConfig) else v
            for k, v in settings.items()
        }
        self._context: tuple[HydraContext, TaskFunction, DictConfig] | None = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self._context = (hydra_context, task_function, config)

    def sweep(self, arguments: list[str]) -> None:
        assert self._context is not None
        launch.start(self._settings, *self._context, arguments)
