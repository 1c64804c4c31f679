"""loadertune: find the fastest PyTorch DataLoader settings, measured end to end.

Public API, imported lazily so ``import loadertune`` stays cheap::

    from loadertune import AutoLoader, build_dataloader, to_device, run_trial, TrialResult
"""

from __future__ import annotations

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
    "AutoLoader": "loadertune.autoloader",
    "ConfigError": "loadertune.errors",
    "LoaderConfig": "loadertune.config._typed",
    "TrialResult": "loadertune.record._result",
    "build_dataloader": "loadertune.loader._build",
    "prepare_autoloader": "loadertune.autoloader",
    "run_trial": "loadertune.trial",
    "to_device": "loadertune.loader._build",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'loadertune' has no attribute {name!r}")
