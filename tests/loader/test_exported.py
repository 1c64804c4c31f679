"""``loader=best`` reads a file anyone can edit: the command holds it to ``build_dataloader``'s
trust rule and to loader keys only, before Hydra composes, in one line with exit status 2.

Each fault is a real hand-edited ``<paths.output_root>/conf/loader/best.yaml`` read by the
command's main (one of them by the installed command in a subprocess); a marker file the
named callable would write says nothing ran.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loadertune.errors import ConfigError, ExitStatus
from loadertune.loader import check_loader_choice
from tests._cli import run_cli, run_main

FAST = ["model=simulated", "model.step_ms=2", "tracking.enabled=false"]


def _export(root: Path, text: str) -> Path:
    path = root / "conf" / "loader" / "best.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _refused(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("loadertune: error: "), err
    return lines[0]


@pytest.mark.parametrize(
    ("key", "path", "names"),
    [
        ("collate_fn", "subprocess.getoutput", "names the standard library"),
        ("collate_fn", "builtins.eval", "names the standard library"),
        ("worker_init_fn", "os.system", "names the standard library"),
        ("collate_fn", "torch.utils.collect_env.run", "names the installed package torch"),
        ("collate_fn", "loadertune.loader.to_device", "names the installed package loadertune"),
    ],
)
def test_a_hand_edited_export_naming_untrusted_code_is_refused(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    key: str,
    path: str,
    names: str,
) -> None:
    best = _export(tmp_path, f"batch_size: 4\nnum_workers: 0\n{key}: {path}\n")
    status = run_main(monkeypatch, tmp_path, "loader=best", f"paths.output_root={tmp_path}", *FAST)
    line = _refused(capsys.readouterr().err)
    assert status == ExitStatus.BAD_INPUT, line
    assert line.startswith(f"loadertune: error: loader.{key}={path}: read from {best}: {names}")
    assert f"Fix: edit {best}, or give it on the command line (loader.{key}={path})" in line
    assert not (tmp_path / "runs").exists()


def test_the_installed_command_runs_no_shell_a_hand_edited_export_names(tmp_path: Path) -> None:
    """The probe's fault: ``collate_fn: subprocess.getoutput`` once ran shell commands."""
    _export(tmp_path, "batch_size: 4\nnum_workers: 0\ncollate_fn: subprocess.getoutput\n")
    proc = run_cli(tmp_path, "loader=best", f"paths.output_root={tmp_path}", *FAST, timeout=120)
    line = _refused(proc.stderr)
    assert proc.returncode == ExitStatus.BAD_INPUT, proc.stderr
    assert "loader.collate_fn=subprocess.getoutput: read from" in line


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "# @package _global_\nloader:\n  batch_size: 4\n  collate_fn: subprocess.getoutput\n",
            "has a Hydra package line (# @package _global_)",
        ),
        ("defaults:\n  - override /model: custom\nbatch_size: 4\n", "holds defaults, not loader"),
        ("batch_size: 4\nmodel:\n  _target_: os.system\n", "holds model, not loader keys"),
    ],
)
def test_an_export_that_reaches_beyond_the_loader_group_is_refused(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    text: str,
    problem: str,
) -> None:
    best = _export(tmp_path, text)
    status = run_main(monkeypatch, tmp_path, "loader=best", f"paths.output_root={tmp_path}", *FAST)
    line = _refused(capsys.readouterr().err)
    assert status == ExitStatus.BAD_INPUT, line
    assert line.startswith(f"loadertune: error: loader={best}: ")
    assert problem in line and f"Fix: remove it from {best}" in line


def test_each_option_of_a_sweep_over_exports_is_checked(tmp_path: Path) -> None:
    _export(tmp_path, "batch_size: 4\ncollate_fn: os.system\n")
    for value in ("default,best", "choice(default,best)"):
        with pytest.raises(ConfigError, match=r"^loader\.collate_fn=os\.system: read from"):
            check_loader_choice([f"loader={value}", f"paths.output_root={tmp_path}"])


def test_trusted_code_or_the_command_lines_own_word_passes(
    tmp_path: Path, fixtures_on_path: Path
) -> None:
    root = f"paths.output_root={tmp_path}"
    for collate in ("torch.utils.data.default_collate", "user_steps.lambda_collate"):
        _export(tmp_path, f"batch_size: 4\ncollate_fn: {collate}\nnproc_per_node: 1\n")
        check_loader_choice(["loader=best", root])
    _export(tmp_path, "batch_size: 4\ncollate_fn: os.system\n")
    check_loader_choice(["loader=best", root, "loader.collate_fn=user_steps.lambda_collate"])
