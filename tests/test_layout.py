"""The source tree's shape: no import cycle, the sweeper's wings import only downward, each
wing lists its rooms, and modules and functions stay small enough to read in one pass."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
SWEEPER = SRC / "hydra_plugins" / "loadertune_sweeper"
ARCHITECTURE = SRC.parent / "docs" / "architecture.md"
# The sweeper's wings, bottom to top: a room may import rooms of its own wing or of a wing
# listed before it (and the top-level rooms: config, the schemas, the private fences).
WINGS = ["study", "plan", "verdict", "record", "trial", "engine", "launch"]
MAX_TOP_LEVEL = 14
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in SRC.rglob("*.py")}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module of ours that ``name`` imports, wherever the import stands (top level,
    inside a function, or under TYPE_CHECKING)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name and not name.startswith(t + "."):
                found.add(t)
    return found


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    return {n: _imports(n, p, known) for n, p in mods.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return [*stack[stack.index(m) :], m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_in_src() -> None:
    assert _cycle(_graph()) is None


def _wing(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["hydra_plugins", "loadertune_sweeper"] or len(parts) < 4:
        return None
    return parts[2] if parts[2] in WINGS else None


def test_the_sweepers_wings_import_only_downward() -> None:
    upward = []
    for name, deps in _graph().items():
        wing = _wing(name)
        if wing is None:
            continue
        for dep in deps:
            other = _wing(dep)
            if other is not None and WINGS.index(other) > WINGS.index(wing):
                upward.append(f"{name} -> {dep}")
    assert upward == []


def test_the_sweepers_top_level_is_small_and_every_wing_lists_its_rooms() -> None:
    top = [p for p in SWEEPER.iterdir() if p.name != "__init__.py" and p.name != "__pycache__"]
    assert len(top) <= MAX_TOP_LEVEL, sorted(p.name for p in top)
    assert sorted(p.name for p in top if p.is_dir()) == sorted(WINGS)
    for wing in WINGS:
        doc = ast.get_docstring(ast.parse((SWEEPER / wing / "__init__.py").read_text())) or ""
        rooms = {p.stem for p in (SWEEPER / wing).glob("_*.py") if p.name != "__init__.py"}
        listed = set(re.findall(r"``(_[a-z_]+)``", doc))
        assert listed == rooms, f"{wing}/__init__.py lists {sorted(listed)}, holds {sorted(rooms)}"


def test_the_architecture_notes_name_every_room() -> None:
    text = ARCHITECTURE.read_text()
    missing = [
        f"{p.parent.name}/{p.name}"
        for p in SWEEPER.glob("*/_*.py")
        if p.name != "__init__.py" and f"`{p.parent.name}/{p.name}`" not in text
    ]
    assert missing == []


@pytest.mark.parametrize("path", sorted(SRC.rglob("*.py")), ids=lambda p: _module_name(p))
def test_modules_and_functions_stay_small(path: Path) -> None:
    lines = path.read_text().splitlines()
    assert len(lines) <= MAX_MODULE_LINES
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long == []
