"""Every numeric ``hydra.sweeper`` key refuses ``nan``, ``inf`` and ``-inf`` in one line, exit
status 2, before a study opens: ``startup_timeout_s=nan`` once turned the start-up hang guard
off, ``memory_budget_mb=nan`` printed a traceback. The keys are read from the schemas (the
settings', the pruner's), and a search space's values are held to the same rule."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hydra_plugins.loadertune_sweeper._optuna_schemas import IntervalPrunerConfig
from hydra_plugins.loadertune_sweeper.config import SweepSettings
from loadertune.errors import ExitStatus
from tests._cli import run_main
from tests.checks.test_bad_input import composed_sweep, sweeper_arguments
from tests.conftest import with_tiny

KEYS = [f.name for f in dataclasses.fields(SweepSettings) if "float" in str(f.type)]
FAST = ["model=simulated", "model.step_ms=2", "tracking.enabled=false", "trial.host_lock=off"]


def test_the_keys_the_probe_found_are_in_the_table() -> None:
    wanted = {"startup_timeout_s", "stall_timeout_s", "trial_timeout_s", "busy_wait_s"}
    assert wanted | {"memory_budget_mb", "train_hours", "max_failure_rate"} <= set(KEYS)


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf"])
@pytest.mark.parametrize("key", KEYS)
def test_a_sweep_setting_that_is_not_finite_ends_the_sweep_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, bad: str
) -> None:
    from hydra_plugins.loadertune_sweeper.launch._start import start

    cfg = composed_sweep(tmp_path, f"hydra.sweeper.{key}={bad}")
    with pytest.raises(SystemExit) as ended:
        start(sweeper_arguments(cfg), None, None, cfg, [])  # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert ended.value.code == ExitStatus.BAD_INPUT, err
    assert err.splitlines() == [err.strip()], err
    assert err.startswith(f"loadertune: error: hydra.sweeper.{key}={bad}: is not a finite"), err
    assert f"Fix: give hydra.sweeper.{key} a finite number" in err
    assert not (tmp_path / "optuna.db").exists()


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("hydra.sweeper.pruner.tolerance=nan", "hydra.sweeper.pruner.tolerance=nan"),
        ("trial.precision=choice(0.02,nan)", "trial.precision=nan"),
        ("trial.time_limit_s=interval(10,inf)", "trial.time_limit_s=inf"),
    ],
)
def test_a_pruner_option_or_a_swept_value_that_is_not_finite_is_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    override: str,
    named: str,
) -> None:
    """The command's main, in-process: each of these reached a trial or a traceback."""
    assert any(f.name == "tolerance" for f in dataclasses.fields(IntervalPrunerConfig))
    args = ["-m", f"paths.output_root={tmp_path}", "hydra.sweeper.n_trials=1", *with_tiny(FAST)]
    status = run_main(monkeypatch, tmp_path, *args, override)
    err = capsys.readouterr().err
    assert status == ExitStatus.BAD_INPUT, err
    assert err.splitlines() == [err.strip()], err
    assert err.startswith(f"loadertune: error: {named}: is not a finite number. Fix:"), err
    assert not (tmp_path / "optuna.db").exists()
