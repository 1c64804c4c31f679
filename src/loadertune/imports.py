"""Import a user's class by its dotted path, or say in one line why it cannot be imported."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from loadertune.errors import ConfigError


def import_target(path: str) -> Callable[..., Any]:
    """Import ``pkg.module.Class`` named by ``dataset._target_``, or say why it cannot be."""
    module_name, _, attr = path.rpartition(".")
    if not module_name:
        raise ConfigError(
            "dataset._target_", path, "is not a dotted path", "write it as my_pkg.module.MyDataset"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            "dataset._target_",
            path,
            f"cannot be imported ({exc})",
            "install the package or add its folder to PYTHONPATH",
        ) from None
    target = getattr(module, attr, None)
    if not callable(target):
        raise ConfigError(
            "dataset._target_",
            path,
            f"module {module_name} has no class {attr}",
            "check the class name",
        )
    return target  # type: ignore[no-any-return]
