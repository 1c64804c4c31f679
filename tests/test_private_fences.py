"""PyTorch's, Hydra's and Optuna's private names appear in src/ only inside their fence modules.

A fence is the one module per library that goes past its public API, one function per private
name with why. The names it uses are read from it, so a name fenced later is checked everywhere
else too; imports of a library's private modules and dotted paths through them are caught
whether fenced yet or not.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from loadertune import _hydra_private

SRC = Path(__file__).resolve().parents[1] / "src"
SWEEPER = SRC / "hydra_plugins" / "loadertune_sweeper"
FENCES = {
    "torch": SRC / "loadertune" / "_torch_private.py",
    "hydra": SRC / "loadertune" / "_hydra_private.py",
    "optuna": SWEEPER / "_optuna_private.py",
}
LIBRARIES = tuple(FENCES)
# _name; neither __dunder__ nor Hydra's public config keys (_target_, _recursive_)
_PRIVATE = re.compile(r"^_[A-Za-z](\w*[A-Za-z0-9])?$")
_OWN = ("self", "cls")


def _private(name: str) -> bool:
    return bool(_PRIVATE.match(name))


def _dotted(text: str) -> bool:
    """A dotted path into a library through a private name: ``hydra._internal.X``."""
    parts = text.split(".")
    return (
        len(parts) > 1
        and parts[0] in LIBRARIES
        and all(p.isidentifier() for p in parts)
        and any(_private(p) for p in parts)
    )


def _private_import(node: ast.Import | ast.ImportFrom) -> str | None:
    """The import's text when it reaches a library's private module or name."""
    if isinstance(node, ast.ImportFrom):
        if node.level or node.module is None:
            return None
        parts = [*node.module.split("."), *(a.name for a in node.names)]
        text = f"from {node.module} import {', '.join(a.name for a in node.names)}"
    else:
        parts = [p for a in node.names for p in a.name.split(".")]
        text = f"import {', '.join(a.name for a in node.names)}"
    if parts[0] in LIBRARIES and any(_private(p) for p in parts):
        return text
    return None


def _others_attribute(node: ast.AST) -> str | None:
    """``x._name`` on anything but ``self``/``cls``: the attribute's name."""
    if not isinstance(node, ast.Attribute) or not _private(node.attr):
        return None
    own = isinstance(node.value, ast.Name) and node.value.id in _OWN
    return None if own else node.attr


def _string(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def fenced_names(tree: ast.AST) -> set[str]:
    """The private attribute and ``getattr`` names a fence module uses on others' objects."""
    names = set()
    for node in ast.walk(tree):
        attribute, text = _others_attribute(node), _string(node)
        if attribute is not None:
            names.add(attribute)
        elif text is not None and _private(text):
            names.add(text)
    return names


def private_uses(tree: ast.AST, fenced: set[str]) -> list[tuple[int, str]]:
    """(line, what) of each use of a library's private name in a module outside the fences."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        attribute, text = _others_attribute(node), _string(node)
        if isinstance(node, ast.Import | ast.ImportFrom):
            imported = _private_import(node)
            if imported is not None:
                found.append((node.lineno, imported))
        elif attribute in fenced:
            found.append((getattr(node, "lineno", 0), f".{attribute}"))
        elif text is not None and (text in fenced or _dotted(text)):
            found.append((getattr(node, "lineno", 0), repr(text)))
    return found


def _fenced() -> set[str]:
    names: set[str] = set()
    for path in FENCES.values():
        names |= fenced_names(ast.parse(path.read_text(), str(path)))
    return names


def test_each_fence_holds_its_library_private_names() -> None:
    by_fence = {lib: fenced_names(ast.parse(p.read_text())) for lib, p in FENCES.items()}
    assert {"_iterator", "_workers", "_shutdown_workers", "_worker_pids_set"} <= by_fence["torch"]
    assert {"_return_value"} <= by_fence["hydra"]
    assert {"_storage", "_trial_id"} <= by_fence["optuna"]
    assert _dotted(_hydra_private.BASIC_LAUNCHER)


def test_the_installed_libraries_still_have_what_the_fences_reach() -> None:
    """The fences read PyTorch's attributes best effort: a rename would make them do nothing."""
    from hydra.core.utils import JobReturn
    from hydra.utils import get_class
    from torch.utils.data import dataloader
    from torch.utils.data._utils import signal_handling

    assert get_class(_hydra_private.BASIC_LAUNCHER).__name__ == "BasicLauncher"
    from hydra._internal import utils as hydra_utils

    assert callable(hydra_utils.run_and_report)  # what composition_errors wraps
    assert "_return_value" in {f.name for f in dataclasses.fields(JobReturn)}
    assert callable(signal_handling._set_worker_pids)  # type: ignore[attr-defined]
    assert callable(signal_handling._remove_worker_pids)  # type: ignore[attr-defined]
    assert callable(dataloader._MultiProcessingDataLoaderIter._shutdown_workers)


def test_no_private_library_name_outside_its_fence() -> None:
    fenced = _fenced()
    fences = set(FENCES.values())
    offences = [
        f"{path.relative_to(SRC)}:{line}: {what}"
        for path in sorted(SRC.rglob("*.py"))
        if path not in fences
        for line, what in private_uses(ast.parse(path.read_text(), str(path)), fenced)
    ]
    assert not offences, "use the fence module's function instead:\n" + "\n".join(offences)


@pytest.mark.parametrize(
    "code",
    [
        "loader._iterator = None",
        "ws = getattr(it, '_workers', [])",
        "it._shutdown_workers()",
        "from torch.utils.data._utils import signal_handling",
        "from torch.utils.data import _utils",
        "import torch._C",
        "BASIC = 'hydra._internal.core_plugins.basic_launcher.BasicLauncher'",
        "err = ret._return_value",
        "s = study._storage",
    ],
)
def test_the_scan_finds_a_private_use(code: str) -> None:
    assert private_uses(ast.parse(code), _fenced())


@pytest.mark.parametrize(
    "code",
    [
        "self._iterator = None",
        "os._exit(1)",
        "from ._hydra_private import job_error",
        "from loadertune import _torch_private",
        "state = {'_iterator_finished': True}",
        "target = 'hydra.launcher._target_'",
        "from torch.utils.data import DataLoader",
    ],
)
def test_the_scan_leaves_public_and_own_names(code: str) -> None:
    assert private_uses(ast.parse(code), _fenced()) == []


def test_shutting_workers_down_waits_for_the_index_queues_feeder_threads() -> None:
    """PyTorch's shutdown leaves each index queue's feeder thread ending a moment later (a
    fork then can hang the new worker in CPython's after-fork code); the fence's shutdown
    returns only once they have ended."""
    from torch.utils.data import DataLoader

    from loadertune import _torch_private

    it = iter(DataLoader(list(range(64)), batch_size=4, num_workers=2))
    for _ in range(3):
        next(it)
    feeders = [q._thread for q in it._index_queues]  # type: ignore[attr-defined]
    assert all(f is not None and f.is_alive() for f in feeders)
    _torch_private.shutdown_workers(it)
    assert not any(f.is_alive() for f in feeders)
