"""The source tree's shape: no import cycle, the core's packages and the sweeper's wings import
only downward, each lists its rooms, modules and functions stay small enough to read in one
pass, and the test tree mirrors the source."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from importlib.util import resolve_name
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
CORE = SRC / "loadertune"
SWEEPER = SRC / "hydra_plugins" / "loadertune_sweeper"
ARCHITECTURE = SRC.parent / "docs" / "architecture.md"
# The sweeper's wings, bottom to top: a room may import rooms of its own wing or of a wing
# listed before it (and the top-level rooms: config, the schemas, the private fences).
WINGS = ["study", "plan", "verdict", "record", "trial", "engine", "launch"]
MAX_TOP_LEVEL = 12
# The core's packages, bottom to top: a module may import its own package, a package listed
# before it, and the top-level fences (errors, exit statuses, the private names of PyTorch and
# Hydra); the other top-level modules (the command, run_trial, the public API) sit above all.
PACKAGES = [
    "config",
    "machine",
    "measure",
    "decision",
    "record",
    "storage",
    "datasets",
    "models",
    "checks",
    "guards",
    "loader",
    "ranks",
    "autoloader",
]
FENCES = ["errors", "_lazy", "_torch_private", "_hydra_private"]
MAX_CORE_TOP_LEVEL = 8  # modules, __init__ and __main__ included
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


def _package(module: str) -> str | None:
    """The core package ``module`` lives in, or ``.name`` for a top-level module; None outside
    the core and for ``loadertune`` itself (every import of ours names it)."""
    parts = module.split(".")
    if parts[0] != "loadertune" or len(parts) == 1:
        return None
    return f".{parts[1]}" if (CORE / f"{parts[1]}.py").is_file() else parts[1]


def test_the_cores_packages_import_only_downward() -> None:
    fences = {f".{f}" for f in FENCES}
    upward = []
    for name, deps in _graph().items():
        package = _package(name)
        if package not in PACKAGES:
            continue
        for dep in deps:
            other = _package(dep)
            if other is None or other in fences or other == "conf":
                continue
            if other not in PACKAGES or PACKAGES.index(other) > PACKAGES.index(package):
                upward.append(f"{name} -> {dep}")
    assert upward == []


def test_no_import_cycle_between_the_cores_packages() -> None:
    graph: dict[str, set[str]] = {}
    for name, deps in _graph().items():
        package = _package(name)
        if package is not None:
            graph.setdefault(package, set()).update(
                other for d in deps if (other := _package(d)) not in (None, package)
            )
    assert _cycle(graph) is None


def test_the_cores_top_level_is_small_and_every_package_lists_its_rooms() -> None:
    top = sorted(p.name for p in CORE.glob("*.py"))
    assert len(top) <= MAX_CORE_TOP_LEVEL, top
    packages = sorted(
        p.name for p in CORE.iterdir() if (p / "__init__.py").is_file() and p.name != "conf"
    )
    assert packages == sorted(PACKAGES)
    for package in PACKAGES:
        doc = ast.get_docstring(ast.parse((CORE / package / "__init__.py").read_text())) or ""
        rooms = {p.stem for p in (CORE / package).glob("_*.py") if p.name != "__init__.py"}
        listed = set(re.findall(r"``(_[a-z_]+)``", doc))
        assert listed == rooms, f"{package}/__init__ lists {sorted(listed)}, holds {sorted(rooms)}"


def _type_checking_imports(tree: ast.Module) -> dict[str, tuple[str, str]] | None:
    """What the ``if TYPE_CHECKING:`` block of a package's ``__init__`` imports, each name as
    its module (relative ones as written) and its name there, where
    ``__getattr__ = lazy_package(...)`` re-exports those names
    (None for a package that does not)."""
    lazy = any(
        isinstance(node, ast.Assign)
        and ast.unparse(node.targets[0]) == "__getattr__"
        and isinstance(node.value, ast.Call)
        and ast.unparse(node.value.func) == "lazy_package"
        for node in tree.body
    )
    return (
        {
            alias.asname or alias.name: ("." * line.level + line.module, alias.name)
            for block in tree.body
            if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
            for line in block.body
            if isinstance(line, ast.ImportFrom) and line.module
            for alias in line.names
        }
        if lazy
        else None
    )


LAZY_PACKAGES = sorted(
    _module_name(init)
    for init in SRC.rglob("__init__.py")
    if _type_checking_imports(ast.parse(init.read_text())) is not None
)


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_a_lazy_package_re_exports_what_its_type_checking_block_imports(package: str) -> None:
    """``__all__`` (what mypy and ruff read) names exactly the names of the TYPE_CHECKING
    imports (what ``lazy_package`` reads), and each resolves to that import, defined below the
    package; any other name is refused naming the package."""
    module = importlib.import_module(package)
    imports = _type_checking_imports(ast.parse(Path(str(module.__file__)).read_text()))
    assert imports is not None
    assert sorted(module.__all__) == sorted(imports)
    for name in module.__all__:
        value = getattr(module, name)
        where, original = imports[name]
        assert value is getattr(importlib.import_module(resolve_name(where, package)), original)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__.startswith(f"{package}."), f"{name}: {value.__module__}"
    with pytest.raises(AttributeError, match=re.escape(repr(package))):
        _ = module.no_such_name


def _lazy_names(init: Path) -> set[str] | None:
    """The names a package's ``lazy_package`` re-exports and those its ``__init__`` defines (None
    for a package without ``lazy_package``)."""
    tree = ast.parse(init.read_text())
    imports, defined = _type_checking_imports(tree), set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined.update(ast.unparse(target) for target in node.targets)
    return None if imports is None else set(imports) | defined


def test_every_name_imported_from_a_lazy_package_is_one_it_re_exports() -> None:
    """Its ``__getattr__`` lets mypy pass any name: this is the check mypy cannot make."""
    roots = [SRC, SRC.parent / "tests", SRC.parent / "scripts", SRC.parent / "benchmarks"]
    missing = []
    for path in (p for root in roots for p in root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            folder = SRC.joinpath(*node.module.split("."))
            names = _lazy_names(folder / "__init__.py") if folder.is_dir() else None
            if names is None:
                continue
            for alias in node.names:
                own = (folder / f"{alias.name}.py").is_file() or (folder / alias.name).is_dir()
                if alias.name not in names and not own:
                    missing.append(f"{path.name}: from {node.module} import {alias.name}")
    assert missing == []


def test_the_architecture_notes_name_every_room() -> None:
    text = ARCHITECTURE.read_text()
    missing = [
        f"{p.parent.name}/{p.name}"
        for p in SWEEPER.glob("*/_*.py")
        if p.name != "__init__.py" and f"`{p.parent.name}/{p.name}`" not in text
    ]
    assert missing == []


def test_the_architecture_notes_name_every_core_package_and_room() -> None:
    """One line a package: ``- `loadertune/<package>/`: ...`` naming each of its rooms."""
    text = ARCHITECTURE.read_text()
    lines = {
        m.group(1): m.group(2)
        for m in re.finditer(r"^- `loadertune/([a-z_]+)/`:(.*)$", text, re.MULTILINE)
    }
    assert sorted(lines) == sorted(PACKAGES)
    missing = [
        f"{package}/{p.name}"
        for package in PACKAGES
        for p in (CORE / package).glob("_*.py")
        if p.name != "__init__.py" and f"`{p.stem}`" not in lines[package]
    ]
    assert missing == []


def test_every_import_stands_at_the_head_of_its_module() -> None:
    """A reader sees a module's dependencies at its head: none is imported inside a function.
    What must wait for its first use is named there too, through ``loadertune._lazy`` (a
    heavy library) or a lazy package's ``__getattr__`` (a room that imports PyTorch)."""
    inside = [
        f"{_module_name(path)}:{node.lineno} {ast.unparse(node)}"
        for path in sorted(SRC.rglob("*.py"))
        for function in ast.walk(ast.parse(path.read_text()))
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(function)
        if isinstance(node, ast.Import | ast.ImportFrom)
    ]
    assert inside == []


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


TESTS = SRC.parent / "tests"
# Test modules that stay at the top of tests/: the tree's own shape, and the top-level modules
# of the core (exit statuses, run_trial).
TOP_TESTS = {
    "test_layout.py",
    "test_lazy.py",
    "test_private_fences.py",
    "test_suite_isolation.py",
    "test_errors.py",
    "test_trial.py",
    "test_trial_streaming.py",
}


def test_the_test_tree_mirrors_the_source() -> None:
    """A unit test lives in ``tests/<package>/`` for a core package, ``tests/sweeper/<wing>/``
    for a sweeper wing; ``loadertune`` in a subprocess and the frameworks in ``tests/e2e/``.
    A new test module elsewhere, or a folder named for no package, fails here."""
    folders = {"e2e", "sweeper", *(f"sweeper/{w}" for w in WINGS), *PACKAGES}
    for path in TESTS.rglob("test_*.py"):
        where = path.parent.relative_to(TESTS).as_posix()
        if where == ".":
            assert path.name in TOP_TESTS, f"{path.name}: move it to the folder of what it tests"
        elif not where.startswith("fixtures_pkg"):
            assert where in folders, f"tests/{where}: no source package of that name"
            assert (path.parent / "__init__.py").exists(), f"tests/{where} lacks __init__.py"
