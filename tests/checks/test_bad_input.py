"""Bad input across the whole CLI: every typed key of every config option, and the ranges.

Each bad value must give one line naming the key (and a fix), before anything starts.
Wrong types are generated for every leaf key of every option of every group; range errors
(negative, zero, nonsense strings, missing paths) come from a table. The entry points (a
single trial, a sweep) are called in-process: one line, exit status 2, nothing recorded.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from omegaconf import DictConfig, OmegaConf

from loadertune.checks import _resolvers as resolvers
from loadertune.checks._validation import validate
from loadertune.config._typed import to_run_config
from loadertune.errors import ConfigError, ExitStatus
from tests._cli import run_cli, run_main
from tests.conftest import CONF, Compose

GROUPS = ("dataset", "storage", "model", "loader", "trial", "tracking")
# Keys whose value is free text or free-form by design.
FREE = {
    "dataset.name",
    "storage.name",
    "model.name",
    "tracking.experiment",
    "tracking.run_name",
    "tracking.tracking_uri",
    "trial.device",
    "loader.multiprocessing_context",
    "dataset.root",
    "storage.root",
    "storage.path",
}


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def typed_leaves(compose: Compose) -> Iterator[tuple[str, str, object]]:
    """(group option, dotted key, default value) for every typed leaf of every option."""
    for group in GROUPS:
        for option in options(group):
            if group == "dataset" and option in ("custom", "image_folder"):
                continue
            cfg = compose([f"{group}={option}"])
            node = OmegaConf.to_container(cfg[group], resolve=True)
            assert isinstance(node, dict)
            for key, value in node.items():
                full = f"{group}.{key}"
                if full in FREE or isinstance(value, dict | list):
                    continue
                if isinstance(value, bool | int | float):
                    yield f"{group}={option}", full, value


def test_every_typed_key_rejects_a_wrong_type(compose: Compose) -> None:
    checked = 0
    for choice, key, default in typed_leaves(compose):
        bad = "yes_please" if not isinstance(default, bool) else "maybe"
        try:
            config = to_run_config(compose([choice, f"{key}={bad}"]))
            validate(config)
        except ConfigError as exc:
            message = str(exc)
            assert message.startswith(f"{key}="), (choice, key, message)
            assert "\n" not in message
            assert "Fix: " in message
            checked += 1
            continue
        raise AssertionError(f"{choice} {key}={bad} was accepted")
    assert checked >= 30


RANGES = [
    (["loader.batch_size=0"], "loader.batch_size=0"),
    (["loader.batch_size=-8"], "loader.batch_size=-8"),
    (["loader.num_workers=-1"], "loader.num_workers=-1"),
    (["loader.num_workers=2", "loader.prefetch_factor=0"], "loader.prefetch_factor=0"),
    (
        ["loader.multiprocessing_context=threads", "loader.num_workers=1"],
        "loader.multiprocessing_context=threads",
    ),
    (["trial.steps=0"], "trial.steps=0"),
    (["trial.warmup_steps=-1"], "trial.warmup_steps=-1"),
    (["trial.time_limit_s=-3"], "trial.time_limit_s=-3"),
    (["trial.sample_hz=0"], "trial.sample_hz=0"),
    (["trial.device=quantum"], "trial.device=quantum"),
    (["trial.torch_threads=0"], "trial.torch_threads=0"),
    (["dataset.count=0"], "dataset.count=0"),
    (["dataset.image_size=0"], "dataset.image_size=0"),
    (["dataset.crop_size=-1"], "dataset.crop_size=-1"),
    (["dataset.quality=0"], "dataset.quality=0"),
    (["dataset.num_classes=0"], "dataset.num_classes=0"),
    (["dataset=image_folder", "dataset.root=/no/such/folder"], "dataset.root=/no/such/folder"),
    (["dataset=custom", "dataset._target_=not_a_module.Data"], "dataset._target_="),
    (["model=simulated", "model.step_ms=-5"], "model.step_ms=-5"),
    (["model=mlp", "model.hidden=0"], "model.hidden=0"),
    (["model=mlp", "model.layers=-1"], "model.layers=-1"),
    (["model=small_cnn", "model.channels=0"], "model.channels=0"),
    (["model=mlp", "model.lr=-0.1"], "model.lr=-0.1"),
]


@pytest.mark.parametrize(("overrides", "prefix"), RANGES)
def test_out_of_range_values_name_the_key(
    compose: Compose, overrides: list[str], prefix: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as info:
        validate(to_run_config(compose(overrides)))
    message = str(info.value)
    assert message.startswith(prefix), message
    assert "Fix: " in message
    assert not (tmp_path / "mlflow.db").exists()


# ---- the entry points, in-process: one line on stderr, exit status 2, nothing recorded ------
# (One console-script run per exit status stays, in tests/e2e/test_cli.py and beside the faults
# it is about; these call the functions the command line calls.)

SINGLE_TRIAL = [
    (["loader.num_workers=-1"], "loader.num_workers=-1"),
    (["loader.persistent_workers=true"], "loader.persistent_workers=true: needs"),
    (["loader.batch_size=0"], "loader.batch_size=0"),
    (["loader.batch_size=null"], "loader.batch_size=null"),
    (["loader.batch_size=true"], "loader.batch_size=true"),
    (["loader.multiprocessing_context=threads"], "loader.multiprocessing_context=threads"),
    (
        ["dataset=image_folder", "dataset.root=/no/such/dir"],
        "dataset.root=/no/such/dir: is not an existing directory",
    ),
    (
        ["dataset=custom", "model=mlp", "dataset._target_=no_such_pkg.Data"],
        "dataset._target_=no_such_pkg.Data: cannot be imported",
    ),
    # Refused while the trial is set up, before any worker starts:
    (["dataset.count=64", "loader.batch_size=1000000000"], "loader.batch_size=1000000000"),
    # More workers than any machine's descriptors (8 a worker) and memory (32 MB) hold:
    (["model=simulated", "loader.num_workers=1000000"], "loader.num_workers=1000000"),
    (["model=simulated", "trial.steps=1"], "trial.steps=1: must be >= 2"),
    (["model=simulated", "trial.host_lock=never"], "trial.host_lock=never"),
    (["model=simulated", "dataset=custom", "dataset._target_=builtins.object"], "dataset."),
    (["model=simulated", "dataset=custom", "dataset._target_=builtins.list"], "dataset."),
]
DETAIL = {"builtins.object": "not a map-style Dataset", "builtins.list": "has no items"}


@pytest.mark.parametrize(("overrides", "prefix"), SINGLE_TRIAL)
def test_a_single_trial_refuses_bad_input_in_one_line_with_status_2(
    compose: Compose,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    overrides: list[str],
    prefix: str,
) -> None:
    from loadertune.cli import run_from_hydra

    cfg = compose([*overrides, "tracking.enabled=true"])  # a trial that ran would be recorded
    with pytest.raises(SystemExit) as ended:
        run_from_hydra(cfg)
    assert ended.value.code == ExitStatus.BAD_INPUT
    err = capsys.readouterr().err
    assert err.splitlines() == [err.strip()], err  # one line, not even an empty one
    assert err.startswith(f"loadertune: error: {prefix}"), err
    assert "Fix: " in err
    target = overrides[-1].partition("=")[2]
    assert DETAIL.get(target, "") in err
    assert not (tmp_path / "mlflow.db").exists()


SWEEP = [
    ("hydra.sweeper.n_trials=-1", "hydra.sweeper.n_trials=-1: must be an integer >= 1"),
    ("hydra.sweeper.n_trials=0", "hydra.sweeper.n_trials=0: must be an integer >= 1"),
    ("hydra.sweeper.max_trials_total=-2", "hydra.sweeper.max_trials_total=-2: must be"),
    ("hydra.sweeper.report_every=0", "hydra.sweeper.report_every=0: must be an integer >= 1"),
    ("hydra.sweeper.verdict_top=0", "hydra.sweeper.verdict_top=0: must be an integer >= 1"),
    ("hydra.sweeper.max_failure_rate=2", "hydra.sweeper.max_failure_rate=2.0: must be in"),
    ("hydra.sweeper.stall_timeout_s=0", "hydra.sweeper.stall_timeout_s=0.0: must be > 0"),
    ("hydra.sweeper.startup_timeout_s=-1", "hydra.sweeper.startup_timeout_s=-1.0: must be > 0"),
    ("hydra.sweeper.startup_timeout_s=null", "hydra.sweeper.startup_timeout_s=null: cannot be"),
    ("hydra.sweeper.memory_budget_mb=-5", "hydra.sweeper.memory_budget_mb=-5.0: must be > 0"),
    ("hydra.sweeper.train_hours=0", "hydra.sweeper.train_hours=0.0: must be > 0. Fix: e.g. "),
    ("hydra.sweeper.train_hours=long", "hydra.sweeper.train_hours=long: value 'long' of type"),
    ("hydra.sweeper.direction=sideways", "hydra.sweeper.direction=sideways: is not minimize"),
    ("hydra.sweeper.storage=nonsense", "hydra.sweeper.storage=nonsense: is not a database"),
    ("hydra.sweeper.host_lock=maybe", "hydra.sweeper.host_lock=maybe: is not a host lock"),
    ("hydra.sweeper.workers=0", "hydra.sweeper.workers=0: must be an integer >= 1"),
    ("hydra.sweeper.count_trials=hosts", "hydra.sweeper.count_trials=hosts: is not invocation"),
    # Types: OmegaConf's own check, in one line naming the key.
    ("hydra.sweeper.n_trials=abc", "hydra.sweeper.n_trials=abc: value 'abc' of type 'str' is not"),
    ("hydra.sweeper.n_trials=2.5", "hydra.sweeper.n_trials=2.5: value '2.5' of type 'float'"),
    ("hydra.sweeper.n_trials=true", "hydra.sweeper.n_trials=true: value 'True' of type 'bool'"),
    ("hydra.sweeper.trial_timeout_s=soon", "hydra.sweeper.trial_timeout_s=soon: value 'soon'"),
    ("hydra.sweeper.busy_wait_s=null", "hydra.sweeper.busy_wait_s=null: cannot be null"),
    ("hydra.sweeper.guess_range=maybe", "hydra.sweeper.guess_range=maybe: value 'maybe' is not"),
    ("hydra.sweeper.verdict_repeats=x", "hydra.sweeper.verdict_repeats=x: value 'x' of type"),
    # The official Optuna sweeper's n_jobs, as a config file brings it (+: Hydra's compose API
    # refuses a new key first; the command line reaches this line): trials never share a machine.
    ("+hydra.sweeper.n_jobs=4", "hydra.sweeper.n_jobs=4: is not a known key. Fix: remove it"),
    ("+hydra.sweeper.n_jobs=1", "hydra.sweeper.n_jobs=1: is not a known key. Fix: remove it"),
]


def composed_sweep(tmp_path: Path, *overrides: str) -> DictConfig:
    """The real conf/ as ``loadertune -m`` composes it, the hydra node included."""
    from hydra import compose, initialize_config_dir

    resolvers.register()
    base = [f"paths.output_root={tmp_path}", "tracking.enabled=false", "hydra.sweeper.study_name=s"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=[*base, *overrides], return_hydra_config=True)


def sweeper_arguments(cfg: DictConfig) -> dict[str, Any]:
    """What Hydra's instantiate hands the sweeper: its node less ``_target_``/``_recursive_``."""
    node = OmegaConf.to_container(cfg.hydra.sweeper, resolve=True)
    assert isinstance(node, dict)
    return {str(k): v for k, v in node.items() if not str(k).startswith("_")}


@pytest.mark.parametrize(("override", "message"), SWEEP)
def test_bad_sweep_settings_end_the_sweep_in_one_line_with_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], override: str, message: str
) -> None:
    from hydra_plugins.loadertune_sweeper.launch._start import start

    cfg = composed_sweep(tmp_path, override)
    with pytest.raises(SystemExit) as ended:
        start(sweeper_arguments(cfg), None, None, cfg, [])  # type: ignore[arg-type]
    assert ended.value.code == ExitStatus.BAD_INPUT
    err = capsys.readouterr().err
    assert err.splitlines() == [err.strip()], err
    assert err.startswith(f"loadertune: error: {message}"), err
    assert "Fix: " in err
    assert not (tmp_path / "optuna.db").exists()


def test_the_default_sweep_settings_pass() -> None:
    from hydra_plugins.loadertune_sweeper.plan._settings_checks import sweep_settings

    settings = sweep_settings(sweeper_arguments(composed_sweep(Path("unused"))))
    assert (settings.n_trials, settings.max_failure_rate, settings.stall_timeout_s) == (12, 1, 60)
    assert isinstance(settings.stall_timeout_s, float)  # typed: YAML's 60 becomes 60.0
    assert settings.params is not None and "loader.num_workers" in settings.params


def test_a_study_store_that_cannot_open_is_one_line_with_status_5(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import optuna

    from hydra_plugins.loadertune_sweeper.engine._loop import SweepEngine
    from hydra_plugins.loadertune_sweeper.plan._settings_checks import sweep_settings

    url = "postgresql://nobody@127.0.0.1:1/none"
    cfg = composed_sweep(tmp_path, f"hydra.sweeper.storage={url}")
    engine = SweepEngine(sweep_settings(sweeper_arguments(cfg)), None, None, cfg)  # type: ignore[arg-type]
    plan = SimpleNamespace(storage=url, study_name="s", space={})
    with pytest.raises(SystemExit) as ended:
        engine._open(plan, optuna.samplers.RandomSampler(), optuna.pruners.NopPruner())  # type: ignore[arg-type]
    assert ended.value.code == ExitStatus.INFRASTRUCTURE
    err = capsys.readouterr().err
    assert err.splitlines() == [err.strip()], err
    assert err.startswith(f"loadertune: error: hydra.sweeper.storage={url}: cannot open the study")


COMMAND_LINE = [
    (["loader.num_workrs=1"], "loader.num_workrs=1: is not a key of the config. Fix: did you "),
    (["-m", "hydra.sweeper.n_trial=3"], "hydra.sweeper.n_trial=3: is not a key of the config."),
    (["model.qqq=1"], "model.qqq=1: is not a key of the config. Fix: use one of model.name"),
    (["dataset=bogus"], "dataset=bogus: is not an option of dataset. Fix: use one of "),
    (["-m", "dataset=bogus,custom"], "dataset=bogus: is not an option of dataset. Fix: "),
    (["loader.num_workers"], "Error parsing override 'loader.num_workers'; missing EQUAL"),
    # The default range's bound reads trial.nproc_per_node: the value's own check names it.
    (["-m", "trial.nproc_per_node=abc"], "trial.nproc_per_node=abc: value 'abc' of type 'str'"),
    (["-m", "trial.nproc_per_node=null"], "trial.nproc_per_node=null: cannot be null. Fix:"),
    (["-m", "trial.nproc_per_node=''"], "trial.nproc_per_node=: value '' of type 'str'"),
]
NEAREST = {"loader.num_workrs=1": "loader.num_workers=1?", "hydra.sweeper.n_trial=3": "n_trials=3?"}


@pytest.mark.parametrize(("args", "prefix"), COMMAND_LINE)
def test_an_override_hydra_refuses_is_one_line_with_status_2(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    prefix: str,
) -> None:
    """What Hydra itself refuses (a key the config lacks, a group option that does not
    exist, an override it cannot parse) gets the same one line and status as every other
    bad input, before anything is recorded: the console script's main, in-process. Without
    tracking: a sweep would make its MLflow store ahead (seconds of MLflow's migrations, in a
    process of its own), which the real command's run below does."""
    argv = [*args, f"paths.output_root={tmp_path}", "trial.host_lock=off"]
    status = run_main(monkeypatch, tmp_path, *argv, "tracking.enabled=false")
    err = capsys.readouterr().err
    assert status == ExitStatus.BAD_INPUT, err
    assert err.splitlines() == [err.strip()], err
    assert err.startswith(f"loadertune: error: {prefix}"), err
    assert NEAREST.get(args[-1], "") in err
    assert not (tmp_path / "optuna.db").exists()  # no study (a sweep's MLflow store is
    # set up ahead, beside torch's import: its schema, no run)


def test_an_override_hydra_refuses_is_one_line_with_status_2_from_the_command(
    tmp_path: Path,
) -> None:
    """The real command, for a sweep's: its exit status and its one line on stderr, the
    MLflow store it made ahead waited for."""
    args, prefix = COMMAND_LINE[6]
    assert args == ["-m", "trial.nproc_per_node=abc"]
    argv = [*args, f"paths.output_root={tmp_path}", "trial.host_lock=off"]
    proc = run_cli(tmp_path, *argv, timeout=300)
    assert proc.returncode == ExitStatus.BAD_INPUT, proc.stderr
    assert proc.stderr.splitlines() == [proc.stderr.strip()], proc.stderr
    assert proc.stderr.startswith(f"loadertune: error: {prefix}"), proc.stderr
    assert not (tmp_path / "optuna.db").exists()  # no study (a sweep's MLflow store is
    # set up ahead, beside torch's import: its schema, no run)
