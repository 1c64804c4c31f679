"""Where ``loader=best`` finds the settings a verdict exported, checked before Hydra composes.

A sweep's verdict writes ``<paths.output_root>/conf/loader/best.yaml``; the search-path plugin
(``hydra_plugins.loadertune_searchpath``) adds ``<paths.output_root>/conf`` for the output root
the command line names, so ``loadertune loader=best paths.output_root=X`` reads ``X``'s export
and never another folder's. Hydra's own errors for a missing or broken option are a raw
"Could not find" or a long YAML traceback; :func:`check_loader_choice` says it in one line.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from loadertune.errors import ConfigError
from loadertune.loader._build import read_loader_yaml

DEFAULT_OUTPUT_ROOT = "outputs"
PACKAGED = Path(__file__).resolve().parents[1] / "conf"


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
    """Raise :class:`~loadertune.errors.ConfigError` if ``loader=<name>`` names an exported
    option that is missing or unreadable (a packaged option, or an explicit
    ``hydra.searchpath``, is left to Hydra)."""
    names = [a.split("=", 1)[1] for a in argv if a.lstrip("+").startswith("loader=")]
    if not names or any(a.startswith("hydra.searchpath") for a in argv):
        return
    name = names[-1]
    if not name.replace("_", "").replace("-", "").isalnum():
        return  # a sweep over options (best,default) or null: Hydra's to read
    if (PACKAGED / "loader" / f"{name}.yaml").is_file():
        return
    path = exported_conf(argv) / "loader" / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(
            "loader",
            name,
            f"no such option: {path} does not exist (a verdict exports it to "
            "<paths.output_root>/conf/loader/best.yaml)",
            "run the sweep first (loadertune -m) with the same paths.output_root, pass "
            "paths.output_root=<the sweep's root>, or use loader=default",
        )
    read_loader_yaml(path)
