"""Importing on first use, in one place: a package's names from its rooms, and the heavy
third-party modules.

A package's ``__init__`` lists what it re-exports in its ``if TYPE_CHECKING:`` block and sets
``__getattr__ = lazy_package(__name__, __file__)``: importing the package imports none of its
rooms, and a name's room is imported when the name is first read.

A module names the heavy libraries it uses at its head, ``from loadertune._lazy import
torch``, and the import itself waits until a function first reads an attribute of it. The
command's refusals, ``import loadertune`` and the sweep's own process so never pay for what
they do not run: here PyTorch takes 1.7 s to import, MLflow 1.7 s, webdataset 1.5 s, Hugging
Face ``datasets`` 0.9 s, pyplot 0.5 s (2-core machine, load 1). Lighter libraries (numpy,
Pillow, psutil, rich, PyYAML, Hydra) are imported at the heads of the modules that use them.
Each heavy name is written once, in the ``if TYPE_CHECKING:`` block below: mypy reads the
real modules there, and at run time each becomes a :class:`LazyModule` built from the same
lines.
"""

from __future__ import annotations

import ast
import importlib
import types
from collections.abc import Callable
from importlib.util import resolve_name
from typing import TYPE_CHECKING, Any

__all__ = [
    "LazyModule",
    "ddp_hooks",
    "dist",
    "elastic_api",
    "elastic_errors",
    "elastic_launcher",
    "elastic_logs",
    "elastic_rendezvous",
    "hf_datasets",
    "hf_distributed",
    "lazy_package",
    "matplotlib",
    "mlflow",
    "mlflow_entities",
    "mlflow_exceptions",
    "optuna",
    "plt",
    "sqlalchemy_exc",
    "torch",
    "torch_data",
    "torch_mp",
    "wds",
]

if TYPE_CHECKING:
    import datasets as hf_datasets
    import datasets.distributed as hf_distributed
    import matplotlib
    import matplotlib.pyplot as plt
    import mlflow
    import mlflow.entities as mlflow_entities
    import mlflow.exceptions as mlflow_exceptions
    import optuna
    import sqlalchemy.exc as sqlalchemy_exc
    import torch
    import torch.distributed as dist
    import torch.distributed.algorithms.ddp_comm_hooks.default_hooks as ddp_hooks
    import torch.distributed.elastic.multiprocessing as elastic_logs
    import torch.distributed.elastic.multiprocessing.api as elastic_api
    import torch.distributed.elastic.multiprocessing.errors as elastic_errors
    import torch.distributed.elastic.rendezvous.api as elastic_rendezvous
    import torch.distributed.launcher.api as elastic_launcher
    import torch.multiprocessing as torch_mp
    import torch.utils.data as torch_data
    import webdataset as wds


def lazy_package(package: str, init: str) -> Callable[[str], Any]:
    """The ``__getattr__`` of a package whose names live in its rooms, each room imported on
    the first use of one of its names, so importing the package imports none of them.

    Which name comes from which module is read from the ``from ... import ...`` lines in the
    ``if TYPE_CHECKING:`` block of the package's ``__init__`` (``init``, its ``__file__``): the
    imports mypy already checks, so a name is written there and in ``__all__``, not a third
    time in a map that could drift (as ``lazy_loader.attach_stub`` reads a stub file)."""
    where: dict[str, tuple[str, str]] = {}
    for line in _type_checking_block(init):
        if isinstance(line, ast.ImportFrom):
            module = resolve_name("." * line.level + (line.module or ""), package)
            where.update({a.asname or a.name: (module, a.name) for a in line.names})

    def __getattr__(name: str) -> Any:
        if name in where:
            module, attribute = where[name]
            return getattr(importlib.import_module(module), attribute)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


class LazyModule(types.ModuleType):
    """A stand-in for the module of its name, imported on the first attribute read.

    Every read goes to the module itself (``importlib`` returns it from ``sys.modules`` once
    imported, and waits on the import lock while another thread imports it: 0.4 us a read
    here), so a value the module rebinds later, or that a test patches, is never a stale
    copy."""

    def __getattr__(self, attribute: str) -> Any:
        return getattr(importlib.import_module(self.__name__), attribute)

    def __repr__(self) -> str:
        return f"<module {self.__name__!r}, imported on first use>"


def _type_checking_block(path: str) -> list[ast.stmt]:
    """The statements of the ``if TYPE_CHECKING:`` block at the top level of ``path``."""
    with open(path, encoding="utf-8") as source:
        tree = ast.parse(source.read(), path)
    return [
        line
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        for line in node.body
    ]


def _lazy_modules(path: str) -> dict[str, LazyModule]:
    """The ``import x.y as z`` lines of this module's TYPE_CHECKING block, each as its name
    and a :class:`LazyModule` of the module it names."""
    return {
        alias.asname or alias.name: LazyModule(alias.name)
        for line in _type_checking_block(path)
        if isinstance(line, ast.Import)
        for alias in line.names
    }


if not TYPE_CHECKING:
    globals().update(_lazy_modules(__file__))
