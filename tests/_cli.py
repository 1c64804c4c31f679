"""The installed ``loadertune`` command (or another one) run in a subprocess, as a user runs it.

Every end-to-end test starts its commands here: the environment they get (no
``MLFLOW_TRACKING_URI`` from the caller's shell, the fixtures package importable), the working
directory the test gives, output captured as text, a bounded wait.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.conftest import FIXTURES, with_tiny

SCRIPT = str(Path(sys.executable).with_name("loadertune"))


def cli_env(
    *pythonpath: Path | str, drop: str = "MLFLOW_TRACKING_URI", **extra: str
) -> dict[str, str]:
    """This process's environment less every name starting with ``drop``, ``PYTHONPATH`` the
    folders given (the fixtures package when none), and ``extra`` on top."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath or (FIXTURES,))
    return env | extra


def run_cli(
    cwd: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
    command: Sequence[str] = (SCRIPT,),
    **options: Any,
) -> subprocess.CompletedProcess[str]:
    """``command *args`` (``loadertune`` by default) run to its end in ``cwd``, in ``env``
    (:func:`cli_env` when None), its output captured."""
    return subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        env=cli_env() if env is None else dict(env),
        timeout=timeout,
        cwd=cwd,
        **options,
    )


def start_cli(
    cwd: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    command: Sequence[str] = (SCRIPT,),
    **options: Any,
) -> subprocess.Popen[str]:
    """``command *args`` started in ``cwd`` as :func:`run_cli` runs it, its pipes to read."""
    return subprocess.Popen(
        [*command, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env() if env is None else dict(env),
        cwd=cwd,
        **options,
    )


def sweep_args(out: Path, *overrides: str) -> list[str]:
    """``-m`` writing under ``out``, with the tiny sizes before ``overrides``."""
    return ["-m", f"paths.output_root={out}", *with_tiny(overrides)]
