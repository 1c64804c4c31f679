"""loadertune: find the fastest PyTorch DataLoader settings, measured end to end.

Public API, imported lazily so ``import loadertune`` stays cheap::

    from loadertune import AutoLoader, build_dataloader, to_device, run_trial, TrialResult
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

__all__ = [
    "AutoLoader",
    "ConfigError",
    "LoaderConfig",
    "TrialResult",
    "build_dataloader",
    "prepare_autoloader",
    "run_trial",
    "to_device",
]
__version__ = "0.1.0"

if TYPE_CHECKING:
    from loadertune.autoloader import AutoLoader, prepare_autoloader
    from loadertune.config import LoaderConfig
    from loadertune.errors import ConfigError
    from loadertune.loader import build_dataloader, to_device
    from loadertune.record import TrialResult
    from loadertune.trial import run_trial

_WHERE = {
    "AutoLoader": "autoloader",
    "ConfigError": "errors",
    "LoaderConfig": "config._typed",
    "TrialResult": "record._result",
    "build_dataloader": "loader._build",
    "prepare_autoloader": "autoloader",
    "run_trial": "trial",
    "to_device": "loader._build",
}


def _lazy(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of a package whose names live in its modules: ``where`` maps each
    name to the module below ``package`` that defines it, imported on the name's first use."""

    def __getattr__(name: str) -> Any:
        if name in where:
            return getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


__getattr__ = _lazy(__name__, _WHERE)
