"""Importing on first use: the heavy libraries wait for a function to read them, every read
reaches the real module, and the command's light paths load none of them."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from loadertune import _lazy

HEAVY = ("torch", "mlflow", "webdataset", "datasets", "matplotlib", "optuna", "sqlalchemy")
LAZY_SOURCE = Path(str(_lazy.__file__))


def _loaded(code: str) -> list[str]:
    """The heavy libraries in ``sys.modules`` after ``code`` runs in a fresh interpreter."""
    probe = f"{code}\nimport sys\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    return list(ast.literal_eval(out.stdout.strip().splitlines()[-1]))


def test_a_lazy_module_is_imported_on_its_first_attribute_read() -> None:
    assert _loaded("from loadertune._lazy import torch, mlflow, plt, hf_datasets") == []
    assert _loaded("from loadertune._lazy import torch, mlflow\ntorch.zeros") == ["torch"]


@pytest.mark.parametrize(
    "entry",
    [
        "import loadertune",
        "import loadertune.cli",
        "import loadertune.trial",
        "import hydra_plugins.loadertune_sweeper.loadertune_sweeper",
        "from loadertune.checks import validate",
    ],
)
def test_the_commands_light_paths_import_no_heavy_library(entry: str) -> None:
    """What every ``loadertune`` start and every refusal imports (Hydra imports the sweeper's
    plugin module on every start) pays for none of them."""
    assert _loaded(entry) == []


def test_every_read_reaches_the_module_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """No copy is kept: a value the module rebinds (or a test patches) is what a read sees."""
    import json

    proxy = _lazy.LazyModule("json")
    assert proxy.dumps is json.dumps
    monkeypatch.setattr(json, "dumps", len)
    assert proxy.dumps is len
    with pytest.raises(AttributeError):
        _ = proxy.no_such_name
    assert proxy.__version__ == json.__version__


def test_each_lazy_name_stands_for_the_module_its_type_checking_line_imports() -> None:
    """The names are written once, in the TYPE_CHECKING block mypy reads; ``__all__`` lists
    them (and the helpers), and each stands for the module of its line."""
    lines = [
        alias
        for node in ast.parse(LAZY_SOURCE.read_text()).body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        for line in node.body
        if isinstance(line, ast.Import)
        for alias in line.names
    ]
    names = {alias.asname or alias.name: alias.name for alias in lines}
    assert sorted(_lazy.__all__) == sorted([*names, "LazyModule", "lazy_package"])
    for name, module in names.items():
        proxy = getattr(_lazy, name)
        assert isinstance(proxy, _lazy.LazyModule)
        assert proxy.__name__ == module
        assert importlib.util.find_spec(module) is not None, module
