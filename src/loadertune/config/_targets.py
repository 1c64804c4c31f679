"""Import a user's class or callable by its dotted path, or say in one line why it cannot be."""

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


def resolve(key: str, path: str) -> Callable[..., Any]:
    """The callable at dotted ``path`` (``pkg.module.name``, or ``pkg.module.Class.attr``).

    Raises:
        ConfigError: naming ``key``: the path is malformed, does not import, or is not callable.
    """
    parts = path.split(".")
    if len(parts) < 2 or not all(p.isidentifier() for p in parts):
        raise ConfigError(key, path, "is not a dotted path", "write it as my_pkg.module.name")
    missing: ModuleNotFoundError | None = None
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            found: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and not f"{module_name}.".startswith(f"{exc.name}."):
                _import_failed(key, path, module_name, exc)  # a module the user's code needs
            missing = missing or exc
            continue
        except Exception as exc:  # the user's module raised while being imported
            _import_failed(key, path, module_name, exc)
        for attr in parts[cut:]:
            if not hasattr(found, attr):
                raise ConfigError(
                    key, path, f"{module_name} has no attribute {attr}", "check the name"
                )
            found = getattr(found, attr)
        if not callable(found):
            raise ConfigError(
                key,
                path,
                f"is a {type(found).__name__}, not callable",
                "name a function, a class or another callable",
            )
        return found  # type: ignore[no-any-return]
    raise ConfigError(
        key,
        path,
        f"cannot be imported ({missing})",
        "install the package or add its folder to PYTHONPATH",
    )


def _import_failed(key: str, path: str, module_name: str, exc: Exception) -> None:
    line = (str(exc).strip().splitlines() or [""])[0]
    raise ConfigError(
        key,
        path,
        f"cannot be imported: importing {module_name} raised {type(exc).__name__}: {line}",
        "fix that module, or install what it imports",
    )
