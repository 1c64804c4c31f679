"""The installed ``loadertune`` command (or another one) run in a subprocess, as a user runs it.

Every end-to-end test starts its commands here: the environment they get (no
``MLFLOW_TRACKING_URI`` from the caller's shell, the fixtures package importable), the working
directory the test gives, output captured as text, a bounded wait. A refusal, which ends
before anything runs, can be read from the command's main run in this process instead
(:func:`run_main`); each kind keeps one run of the real command.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import pytest

from tests.conftest import CONF, FIXTURES, with_tiny

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


# A search that stops at a ceiling (``plan._ceiling``) stops where the machine's timings say,
# so the sweeps the tests count trials of measure to their budget; tests of the stop set it.
TO_BUDGET = "hydra.sweeper.stop_at_ceiling=false"


def sweep_args(out: Path, *overrides: str) -> list[str]:
    """``-m`` writing under ``out``, with the tiny sizes and :data:`TO_BUDGET` before
    ``overrides``."""
    return ["-m", f"paths.output_root={out}", TO_BUDGET, *with_tiny(overrides)]


def run_main(monkeypatch: pytest.MonkeyPatch, cwd: Path, *args: str, **env: str) -> int:
    """``loadertune *args`` run in this process as the console script runs it, in ``cwd``
    with ``env`` set and no ``MLFLOW_TRACKING_URI``; its exit status. What it printed is the
    caller's to read (``capsys``).

    For a refusal, which ends before anything runs: a cold start of the command costs seconds
    (a sweep's start imports torch), the same code path here almost nothing. The process's
    end (``loadertune.guards._process_end.end``, which leaves by ``os._exit``) raises SystemExit
    instead; the logging Hydra configures and the environment the command sets for itself
    (MLflow's bounded retries) are put back as they were, and a process the sweep forked (its
    MLflow store, made ahead) is waited for.
    """
    from hydra.core.global_hydra import GlobalHydra

    from loadertune import cli
    from loadertune.guards import _process_end as process_end

    def end(code: object = None) -> NoReturn:
        raise SystemExit(process_end.exit_status(code))

    monkeypatch.setattr(process_end, "end", end)
    monkeypatch.setattr(cli, "end", end, raising=False)  # where the command imports it
    monkeypatch.setattr(sys, "argv", [SCRIPT, *args])
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    loggers = _loggers()
    environment = dict(os.environ)
    children = set(multiprocessing.active_children())
    try:
        cli.main()
    except SystemExit as ended:
        return process_end.exit_status(ended.code)
    finally:
        GlobalHydra.instance().clear()
        os.environ.clear()
        os.environ.update(environment)
        for logger, (level, handlers, disabled, propagate) in loggers.items():
            for added in set(logger.handlers) - set(handlers):
                added.close()  # Hydra's job log file, its console handler
            logger.setLevel(level)
            logger.handlers[:], logger.disabled, logger.propagate = handlers, disabled, propagate
        for child in set(multiprocessing.active_children()) - children:
            child.join(timeout=300)
    raise AssertionError("loadertune's main returned instead of ending the process")


def _loggers() -> dict[logging.Logger, tuple[int, list[logging.Handler], bool, bool]]:
    """Every logger's level, handlers, disabled and propagate flags, the root's included."""
    known = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    return {
        logger: (logger.level, logger.handlers[:], logger.disabled, logger.propagate)
        for logger in known
        if isinstance(logger, logging.Logger)
    }


def made_mlflow_store(out: Path) -> None:
    """Give ``out`` the empty MLflow store a sweep's first start makes there, unless it has
    one: a copy of one made once in this test process.

    A fresh SQLite store runs MLflow's migrations, about 5 s of CPU beside every sweep's start
    (``record/_store_ahead``); the sweeps whose tests read what the sweep recorded, not how
    its store came to be, start from the copy. The making itself is tested on its own
    (tests/sweeper/record/test_store_ahead.py, tests/record/test_mlflow_store.py) and in the
    sweeps that start without one (the review sweep, the shared record sweep of
    tests/e2e/test_sweep.py, the fault sweeps that run the command themselves).
    """
    target = out / "mlflow.db"
    if not target.exists():
        shutil.copyfile(_empty_mlflow_store(), target)


_STORES: list[Path] = []


def _empty_mlflow_store() -> Path:
    """An MLflow SQLite store with its tables and nothing else, made by MLflow in a process of
    its own (no engine left open here), once per test process."""
    if not _STORES:
        folder = Path(tempfile.mkdtemp(prefix="loadertune-test-mlflow-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        db = folder / "mlflow.db"
        make = (
            f"from mlflow import MlflowClient; MlflowClient('sqlite:///{db}').search_experiments()"
        )
        done = run_cli(folder, "-c", make, timeout=600, command=[sys.executable])
        assert done.returncode == 0, done.stderr
        _STORES.append(db)
    return _STORES[0]


def trial_status(
    out: Path,
    *overrides: str,
    wrap: list[str] | None = None,
    preexec: Callable[[], None] | None = None,
) -> tuple[int, str]:
    """Run one trial of the CLI in a subprocess (under ``wrap``); its status and stderr."""
    lock = (
        ["trial.host_lock=off"] if "host_lock:" in (CONF / "trial/default.yaml").read_text() else []
    )
    args = [f"paths.output_root={out}", "tracking.enabled=false", *lock, *overrides]
    command = [*(wrap or []), SCRIPT]
    proc = run_cli(out, *args, timeout=120, command=command, preexec_fn=preexec)
    return proc.returncode, proc.stderr


def tiny_trial(
    out: Path, *overrides: str, module: bool = False
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "loadertune"] if module else [SCRIPT]
    args = [f"paths.output_root={out}", *with_tiny(overrides)]
    return run_cli(out, *args, timeout=300, command=command)
