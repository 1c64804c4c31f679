"""Faults a probe of the newer features found: each injected for real, each ending in one line
and its exit status, with nothing lost or left half-made.

``loader=best`` beside another output root or a broken export, a numeric range changed on
resume, a lock folder that is a file or read-only, a time limit that cuts a window to one step.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from loadertune.errors import ConfigError, ExitStatus
from tests._cli import SCRIPT, cli_env, run_cli, run_main
from tests.conftest import ROOT, lacking, with_tiny

optuna.logging.set_verbosity(optuna.logging.WARNING)

FAST = ["model=simulated", "model.step_ms=2"]


def _run(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_cli(cwd, *args, env=cli_env(**env))


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def _mlflow(out: Path) -> list[Any]:
    """Every run in ``out``'s MLflow store (none when the store was never made)."""
    if not (out / "mlflow.db").exists():
        return []
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    return [
        r
        for e in client.search_experiments()
        for r in client.search_runs([e.experiment_id], max_results=1000)
    ]


# ---- loader=best: the export of the output root asked for, or one line --------------------


def _export(root: Path, text: str) -> Path:
    path = root / "conf" / "loader" / "best.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.slow
def test_loader_best_reads_the_export_of_the_output_root_named(tmp_path: Path) -> None:
    """A stale ``./outputs/conf`` beside the command must never be measured instead."""
    _export(tmp_path / "outputs", "batch_size: 3\nnum_workers: 1\n")
    root = tmp_path / "x"
    _export(root, "batch_size: 5\nnum_workers: 0\n")
    args = with_tiny([*FAST, "loader=best"])
    args.remove("loader.batch_size=4")
    proc = _run(tmp_path, "loader=best", f"paths.output_root={root}", *args)
    assert proc.returncode == ExitStatus.OK, proc.stderr
    (run,) = _mlflow(root)
    assert run.data.params["loader.batch_size"] == "5"
    assert run.data.params["loader.num_workers"] == "0"
    assert not (tmp_path / "outputs" / "mlflow.db").exists()


def test_loader_best_without_an_export_names_the_key_and_the_fix(tmp_path: Path) -> None:
    _export(tmp_path / "outputs", "batch_size: 3\n")  # stale, in another root
    root = tmp_path / "x"
    proc = _run(tmp_path, "loader=best", f"paths.output_root={root}", *FAST)
    assert proc.returncode == ExitStatus.BAD_INPUT, proc.stderr
    line = _one_line(proc.stderr)
    assert line.startswith("loadertune: error: loader=best: no such option")
    assert str(root / "conf" / "loader" / "best.yaml") in line
    assert "Fix:" in line and "paths.output_root" in line
    assert "Could not find" not in proc.stderr
    assert not root.exists()  # nothing made: not even Hydra's run folder


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("batch_size: [4\nnum_workers: 2\n", "is not valid YAML"),
        ("", "holds no loader settings (empty)"),
        ("# only a comment\n", "holds no loader settings (empty)"),
        ("- batch_size: 4\n- num_workers: 2\n", "is a list, not a mapping of loader keys"),
        ("just words\n", "is a str, not a mapping"),
    ],
)
def test_a_broken_export_is_one_line_before_anything_runs(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    text: str,
    problem: str,
) -> None:
    """The command's main, in-process (the real command refuses a missing export above)."""
    path = _export(tmp_path, text)
    status = run_main(monkeypatch, tmp_path, "loader=best", f"paths.output_root={tmp_path}", *FAST)
    err = capsys.readouterr().err
    assert status == ExitStatus.BAD_INPUT, err
    line = _one_line(err)
    assert line.startswith(f"loadertune: error: loader={path}: {problem}")
    assert "Fix: export it again" in line
    assert not (tmp_path / "runs").exists() and not (tmp_path / "mlflow.db").exists()


def test_train_script_refuses_a_broken_export_in_one_line(tmp_path: Path) -> None:
    path = _export(tmp_path, "- 1\n- 2\n")
    train = ROOT / "scripts" / "train.py"
    args = [str(train), "loader=best", f"paths.output_root={tmp_path}"]
    proc = run_cli(tmp_path, *args, timeout=300, command=[sys.executable])
    assert proc.returncode == ExitStatus.BAD_INPUT, proc.stderr
    assert f"loader={path}: is a list" in _one_line(proc.stderr)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("batch_size: [4\n", "is not valid YAML (expected ',' or ']'"),
        ("", "holds no loader settings"),
        ("- 4\n", "is a list"),
    ],
)
def test_build_dataloader_reads_a_best_loader_yaml_or_says_what_is_wrong(
    tmp_path: Path, text: str, problem: str
) -> None:
    from loadertune import build_dataloader
    from tests.fixtures_pkg.user_data import RandomVectors

    path = tmp_path / "best_loader.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        build_dataloader(RandomVectors(length=8), path, device="cpu")
    assert str(caught.value).startswith(f"loader={path}: {problem}")
    path.write_text("batch_size: 2\nnum_workers: 0\n")
    assert build_dataloader(RandomVectors(length=8), path, device="cpu").batch_size == 2


@pytest.mark.parametrize(("text", "problem"), [("", "holds no loader"), ("- 4\n", "is a list")])
def test_build_dataloader_refuses_what_omegaconf_loaded_from_a_broken_file(
    tmp_path: Path, text: str, problem: str
) -> None:
    from omegaconf import OmegaConf

    from loadertune import build_dataloader
    from tests.fixtures_pkg.user_data import RandomVectors

    path = tmp_path / "best_loader.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=problem) as caught:
        build_dataloader(RandomVectors(length=8), OmegaConf.load(path), device="cpu")
    assert str(caught.value).startswith("loader=the loader settings given: ")


# ---- the host's timing lock folder ----------------------------------------------------------


def test_a_lock_folder_that_is_a_file_stops_a_sweep_before_its_study(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command's main, in-process (a read-only lock folder below: the real command)."""
    lock = tmp_path / "lock"
    lock.write_text("not a folder")
    status = run_main(
        monkeypatch,
        tmp_path,
        "-m",
        f"paths.output_root={tmp_path}",
        "hydra.sweeper.study_name=s",
        "hydra.sweeper.n_trials=1",
        *with_tiny(FAST),
        LOADERTUNE_LOCK_DIR=str(lock),
    )
    err = capsys.readouterr().err
    assert status == ExitStatus.INFRASTRUCTURE, err
    line = _one_line(err)
    assert f"LOADERTUNE_LOCK_DIR={lock}: the host's timing lock cannot be kept there" in line
    assert "it is a file, not a folder" in line and "Fix: point LOADERTUNE_LOCK_DIR" in line
    assert not (tmp_path / "optuna.db").exists()  # no study with waiting trials left
    assert _mlflow(tmp_path) == []
    assert lock.read_text() == "not a folder"


def test_a_lock_folder_that_is_a_file_stops_a_single_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command's main, in-process."""
    lock = tmp_path / "lock"
    lock.write_text("")
    args = [f"paths.output_root={tmp_path}", *with_tiny(FAST)]
    status = run_main(monkeypatch, tmp_path, *args, LOADERTUNE_LOCK_DIR=str(lock))
    err = capsys.readouterr().err
    assert status == ExitStatus.INFRASTRUCTURE, err
    assert "LOADERTUNE_LOCK_DIR=" in _one_line(err)
    assert _mlflow(tmp_path) == []


def test_a_read_only_lock_folder_stops_a_sweep_before_its_study(tmp_path: Path) -> None:
    """A read-only tmpfs as the lock folder, in a private mount namespace (root ignores
    a folder's mode bits, so only a read-only mount is read-only for every user)."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        lacking("needs root and unshare for a private mount namespace")
    lock = tmp_path / "lock"
    lock.mkdir()
    args = " ".join(
        [
            SCRIPT,
            "-m",
            f"paths.output_root={tmp_path}",
            "hydra.sweeper.study_name=s",
            *with_tiny(FAST),
        ]
    )
    command = f"mount -t tmpfs -o ro,size=1m tmpfs {lock} || exit 99; exec {args}"
    wrapped = ["unshare", "-m", "sh", "-c", command]
    env = cli_env(LOADERTUNE_LOCK_DIR=str(lock))
    proc = run_cli(tmp_path, env=env, timeout=300, command=wrapped)
    if proc.returncode == 99:
        lacking(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    assert proc.returncode == ExitStatus.INFRASTRUCTURE, proc.stderr
    line = _one_line(proc.stderr)
    assert f"LOADERTUNE_LOCK_DIR={lock}: the host's timing lock cannot be kept there" in line
    assert "Read-only file system" in line
    assert not (tmp_path / "optuna.db").exists()
    assert _mlflow(tmp_path) == []


# ---- the window's floor and the max_steps text ----------------------------------------------


def test_max_steps_error_says_the_factor_the_code_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command's main, in-process."""
    from loadertune.measure._precision import MAX_STEPS_FACTOR, StopRule

    args = [f"paths.output_root={tmp_path}", *FAST, "trial.steps=4", "trial.max_steps=2"]
    status = run_main(monkeypatch, tmp_path, *args)
    err = capsys.readouterr().err
    assert status == ExitStatus.BAD_INPUT, err
    line = _one_line(err)
    assert f"e.g. trial.max_steps={MAX_STEPS_FACTOR * 4}, or null for {MAX_STEPS_FACTOR} x" in line
    assert StopRule.for_trial(4, None, 0.02, 0).max_steps == MAX_STEPS_FACTOR * 4


def test_a_time_limit_that_leaves_one_timed_step_is_a_failed_trial(tmp_path: Path) -> None:
    """Steps of 400 ms against a 50 ms limit: the window stops after its first timed step."""
    args = with_tiny(["model=simulated", "model.step_ms=400"])
    proc = _run(
        tmp_path,
        f"paths.output_root={tmp_path}",
        *args,
        "trial.warmup_steps=0",
        "trial.time_limit_s=0.05",
    )
    assert proc.returncode == ExitStatus.NO_RESULT, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("loadertune: error: trial failed (timeout): trial.time_limit_s=0.05:")
    assert "after 1 timed step(s), and a rate needs at least 2" in line
    assert "Fix: raise trial.time_limit_s" in line
    assert _mlflow(tmp_path) == []  # no figure recorded from one step


@pytest.mark.slow
def test_a_sweep_trial_cut_to_one_step_fails_with_its_reason(tmp_path: Path) -> None:
    proc = _run(
        tmp_path,
        "-m",
        f"paths.output_root={tmp_path}",
        "hydra.sweeper.study_name=s",
        "hydra.sweeper.n_trials=1",
        "hydra.sweeper.verdict_repeats=0",
        *with_tiny(["model=simulated", "model.step_ms=400"]),
        "trial.warmup_steps=0",
        "trial.time_limit_s=0.05",
    )
    assert proc.returncode == ExitStatus.NO_RESULT, proc.stderr
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    ended = [t for t in study.trials if t.state.is_finished()]
    assert [t.state for t in ended] == [TrialState.FAIL]
    assert ended[0].user_attrs["reason"] == "timeout"
    children = [r for r in _mlflow(tmp_path) if r.data.tags.get("loadertune.kind") == "trial"]
    assert [r.info.status for r in children] == ["FAILED"]
    assert children[0].data.tags["reason"] == "timeout"
    assert "trial.time_limit_s=0.05" in proc.stdout + proc.stderr  # the first error shown


# ---- a numeric range changed on resume ------------------------------------------------------


@pytest.mark.slow
def test_a_range_changed_on_resume_drops_stale_queued_trials_and_recommends_inside(
    tmp_path: Path,
) -> None:
    """The first sweep measures only the default trial and leaves baselines (and the guess)
    queued over the default range; the second asks for 3..6 workers."""
    first = _run(
        tmp_path,
        "-m",
        f"paths.output_root={tmp_path}",
        "hydra.sweeper.study_name=s",
        "hydra.sweeper.n_trials=1",
        "hydra.sweeper.verdict_repeats=0",
        *with_tiny(FAST),
    )
    assert first.returncode == ExitStatus.OK, first.stderr
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    queued = {
        t.number: t.system_attrs["fixed_params"]["loader.num_workers"]
        for t in study.trials
        if t.state == TrialState.WAITING
    }
    stale = [n for n, w in queued.items() if not 3 <= w <= 6]
    assert stale  # start at 2 (and the guess, on a small machine): below the new range

    second = _run(
        tmp_path,
        "-m",
        f"paths.output_root={tmp_path}",
        "hydra.sweeper.study_name=s",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.verdict_repeats=1",
        "hydra.sweeper.verdict_top=2",
        "loader.num_workers=int(interval(3,6))",
        *with_tiny(FAST),
    )
    assert second.returncode == ExitStatus.OK, second.stdout + second.stderr
    assert "outside the range searched now and are dropped (not counted)" in second.stdout
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    by_number = {t.number: t for t in study.trials}
    for number in stale:  # dropped, never measured, not counted
        assert by_number[number].state == TrialState.FAIL
        assert by_number[number].user_attrs["reason"] == "out_of_range"
        assert f"trial {number} (loader.num_workers={queued[number]}" in second.stdout
    measured = [
        t
        for t in study.trials
        if t.state == TrialState.COMPLETE and t.number != 0 and "repeat_of" not in t.user_attrs
    ]
    assert len(measured) == 2  # n_trials=2: the dropped ones took no place
    assert all(3 <= t.params["loader.num_workers"] <= 6 for t in measured)
    runs = _mlflow(tmp_path)
    children = [r for r in runs if r.data.tags.get("loadertune.kind") == "trial"]
    workers = sorted(int(r.data.params["loader.num_workers"]) for r in children)
    assert workers[0] == 0 and all(3 <= w <= 6 for w in workers[1:])  # the first sweep's one
    assert len(children) == 3  # no run for a dropped trial
    parents = [r for r in runs if r.data.tags.get("loadertune.kind") == "sweep"]
    recommended = {p.data.params.get("recommended.loader.num_workers") for p in parents}
    recommended.discard(None)
    assert recommended and all(3 <= int(w) <= 6 for w in recommended)
    assert "Recommended: num_workers=" in second.stdout


def test_the_use_line_names_the_output_root_of_the_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loadertune.loader._exported import use_command

    monkeypatch.chdir(tmp_path)
    assert use_command("outputs/conf/loader/best.yaml") == "loadertune loader=best"
    spaced = tmp_path / "my root"
    assert use_command(spaced / "conf" / "loader" / "best.yaml") == (
        f"loadertune loader=best 'paths.output_root={spaced}'"
    )
