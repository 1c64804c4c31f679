"""loadertune: find the fastest PyTorch DataLoader settings, measured end to end.

Public API, imported lazily so ``import loadertune`` stays cheap::

    from loadertune import AutoLoader, build_dataloader, to_device, run_trial, TrialResult
    from loadertune import trainer_arguments  # Hugging Face Trainer's loader keys
    from loadertune import AutoLoaderTrainer  # a Trainer whose loader tunes itself
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadertune._lazy import lazy_package

__all__ = [
    "AutoLoader",
    "AutoLoaderTrainer",
    "ConfigError",
    "LoaderConfig",
    "TrialResult",
    "build_dataloader",
    "prepare_autoloader",
    "run_trial",
    "to_device",
    "trainer_arguments",
]
__version__ = "0.1.0"

if TYPE_CHECKING:
    from loadertune.autoloader import AutoLoader, prepare_autoloader
    from loadertune.autoloader._trainer import AutoLoaderTrainer
    from loadertune.config import LoaderConfig
    from loadertune.errors import ConfigError
    from loadertune.loader import build_dataloader, to_device, trainer_arguments
    from loadertune.record import TrialResult
    from loadertune.trial import run_trial


__getattr__ = lazy_package(__name__, __file__)
