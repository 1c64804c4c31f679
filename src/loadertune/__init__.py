"""loadertune: find the fastest PyTorch DataLoader settings, measured end to end.

Public API, imported lazily so ``import loadertune`` stays cheap::

    from loadertune import AutoLoader, build_dataloader, to_device, run_trial, TrialResult
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable
from importlib.util import resolve_name
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


def _lazy(package: str, init: str) -> Callable[[str], Any]:
    """The ``__getattr__`` of a package whose names live in its rooms, each room imported on
    the first use of one of its names, so importing the package imports none of them.

    Which name comes from which module is read from the ``from ... import ...`` lines in the
    ``if TYPE_CHECKING:`` block of the package's ``__init__`` (``init``, its ``__file__``): the
    imports mypy already checks, so a name is written there and in ``__all__``, not a third
    time in a map that could drift (as ``lazy_loader.attach_stub`` reads a stub file)."""
    with open(init, encoding="utf-8") as source:
        tree = ast.parse(source.read(), init)
    where: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for line in node.body:
                if isinstance(line, ast.ImportFrom):
                    module = resolve_name("." * line.level + (line.module or ""), package)
                    where.update({a.asname or a.name: (module, a.name) for a in line.names})

    def __getattr__(name: str) -> Any:
        if name in where:
            module, attribute = where[name]
            return getattr(importlib.import_module(module), attribute)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


__getattr__ = _lazy(__name__, __file__)
