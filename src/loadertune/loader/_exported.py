"""Where ``loader=best`` finds the settings a verdict exported, checked before Hydra composes.

A sweep's verdict writes ``<paths.output_root>/conf/loader/best.yaml``; the search-path plugin
(``hydra_plugins.loadertune_searchpath``) adds ``<paths.output_root>/conf`` for the output root
the command line names, so ``loadertune loader=best paths.output_root=X`` reads ``X``'s export
and never another folder's. Hydra's own errors for a missing or broken option are a raw
"Could not find" or a long YAML traceback; :func:`check_loader_choice` says it in one line.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from loadertune.checks import check_exported_callables
from loadertune.config import LoaderConfig
from loadertune.errors import ConfigError
from loadertune.loader._build import TUNED_FOR, read_loader_yaml

DEFAULT_OUTPUT_ROOT = "outputs"
PACKAGED = Path(__file__).resolve().parents[1] / "conf"

LOADER_KEYS = frozenset({f.name for f in dataclasses.fields(LoaderConfig)} | {TUNED_FOR})
"""The keys an exported option may hold: the loader group's and the ranks it was tuned for."""

PACKAGE_LINE = re.compile(r"^\s*#\s*@package\b")
"""Hydra's ``# @package`` header, which moves a file's keys anywhere in the config."""


def output_root_of(argv: Sequence[str]) -> str:
    """The output root a command line asks for (the last ``paths.output_root=``), else the
    default: Hydra writes its run directory there before the app runs."""
    root = DEFAULT_OUTPUT_ROOT
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key.lstrip("+") == "paths.output_root":
            root = value
    return root


def exported_conf(argv: Sequence[str]) -> Path:
    """The config folder a verdict exports to, for the output root ``argv`` names."""
    return Path(output_root_of(argv)).expanduser() / "conf"


def use_command(loader_file: str | Path) -> str:
    """The command that measures an exported option again: ``loadertune loader=best``, and
    the output root it lives under unless that is the default one (``./outputs``)."""
    path = Path(loader_file)
    command = f"loadertune loader={path.stem}"
    if path.parent.name != "loader" or path.parent.parent.name != "conf":
        return command  # not an exported option's place: nothing to add
    root = path.parents[2]  # <root>/conf/loader/<name>.yaml
    if root.expanduser().resolve() == Path(DEFAULT_OUTPUT_ROOT).resolve():
        return command
    return f"{command} {shlex.quote(f'paths.output_root={root}')}"


def check_loader_choice(argv: Sequence[str]) -> None:
    """Raise :class:`~loadertune.errors.ConfigError` if ``loader=<name>`` (or each option of a
    sweep's ``loader=best,default``) names an exported option that is missing, unreadable or
    untrusted (a packaged option, or an explicit ``hydra.searchpath``, is left to Hydra).

    An exported file is a verdict's output that anyone can edit, so it is held to
    ``build_dataloader``'s trust rule (:func:`~loadertune.checks.check_exported_callables`)
    and may hold loader keys only: Hydra would obey a ``defaults`` list or a ``@package``
    line in it, and either can select any config, a model's ``_target_`` among them.
    """
    values = [a.split("=", 1)[1] for a in argv if a.lstrip("+").startswith("loader=")]
    if not values or any(a.startswith("hydra.searchpath") for a in argv):
        return
    for name in _option_names(values[-1]):
        if not (PACKAGED / "loader" / f"{name}.yaml").is_file():
            _check_exported(exported_conf(argv) / "loader" / f"{name}.yaml", name, argv)


def _option_names(value: str) -> list[str]:
    """The options ``loader=<value>`` selects: one, a list (``best,default``) or
    ``choice(best,default)``; anything else (``null``, a glob) is Hydra's to read."""
    if value.startswith("choice(") and value.endswith(")"):
        value = value[len("choice(") : -1]
    names = [name.strip() for name in value.split(",")]
    return [n for n in names if n.replace("_", "").replace("-", "").isalnum() and n != "null"]


def _check_exported(path: Path, name: str, argv: Sequence[str]) -> None:
    """The exported option ``name`` at ``path``: there, readable, loader keys only, trusted."""
    if not path.is_file():
        raise ConfigError(
            "loader",
            name,
            f"no such option: {path} does not exist (a verdict exports it to "
            "<paths.output_root>/conf/loader/best.yaml)",
            "run the sweep first (loadertune -m) with the same paths.output_root, pass "
            "paths.output_root=<the sweep's root>, or use loader=default",
        )
    settings = read_loader_yaml(path)
    fix = f"remove it from {path}, or export it again (run the sweep)"
    directive = next(
        (line for line in path.read_text().splitlines() if PACKAGE_LINE.match(line)), None
    )
    if directive is not None:
        raise ConfigError("loader", path, f"has a Hydra package line ({directive.strip()}): "
                          "an exported option holds loader keys only", fix)  # fmt: skip
    unknown = sorted(str(k) for k in settings if k not in LOADER_KEYS)
    if unknown:
        raise ConfigError(
            "loader", path, f"holds {', '.join(unknown)}, not loader keys (an exported option "
            f"holds {', '.join(sorted(LOADER_KEYS))} only)", fix,
        )  # fmt: skip
    check_exported_callables(settings, str(path), argv)
