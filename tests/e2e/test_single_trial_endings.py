"""How a single ``loadertune`` trial ends when the user's code raises or Ctrl-C stops it, with
one rank and with two: the README's exit status, the user's frames and one line, no stray
traceback of the tool's own processes, nothing left running."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import psutil
import pytest

import loadertune
from loadertune.errors import ExitStatus
from tests._cli import start_cli, trial_status
from tests.conftest import with_tiny

pytestmark = pytest.mark.slow

FAULTY = ["dataset=custom", "dataset._target_=faulty_data.Faulty", "model=simulated"]
SIZES = ["model.step_ms=1", "loader.batch_size=4", "trial.warmup_steps=1", "trial.steps=40"]
OURS = str(Path(loadertune.__file__).parent)
ELASTIC = "torch/distributed/elastic"


@pytest.mark.parametrize(
    ("mode", "more"),
    [
        ("raise", ["loader.num_workers=0"]),  # in the trial's own process, before any step
        ("corrupt", ["loader.num_workers=1"]),  # in a worker, after a few steps
        ("corrupt", ["loader.num_workers=1", "++trial.nproc_per_node=2"]),  # in a rank's worker
        ("raise_on_rank1", ["loader.num_workers=0", "++trial.nproc_per_node=2"]),  # rank 1 itself
    ],
)
def test_a_trial_whose_dataset_raises_ends_on_the_users_frame_with_status_4(
    tmp_path: Path, mode: str, more: list[str]
) -> None:
    status, err = trial_status(
        tmp_path, *with_tiny([*FAULTY, *SIZES, f"+dataset.mode={mode}", *more])
    )
    last = err.strip().splitlines()[-1]
    assert status == ExitStatus.DATASET_BUG, err
    assert last.startswith("loadertune: error: trial failed (dataset_error): "), err
    assert 'faulty_data.py", line' in err  # the user's frame is shown
    assert "HYDRA_FULL_ERROR" not in err  # not Hydra's wrapper
    if "++trial.nproc_per_node=2" in more:  # as with one rank, the line names the rank
        assert re.search(r"rank [01] of 2 raised ValueError at faulty_data\.py:\d+ in ", last), err
    else:
        assert "ValueError at faulty_data.py:" in last
    assert "fix it and run again" in last
    assert OURS not in err  # loadertune's own frames are left out
    assert ELASTIC not in err  # and PyTorch's launcher's, with two ranks
    assert err.splitlines().count("Traceback (most recent call last):") == 1  # one error


def _descendants(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return proc.children(recursive=True)
    except psutil.Error:
        return []


def _as_from_a_terminal() -> None:
    """Ctrl-C's default disposition, as a command typed at a terminal has it: a suite started
    from a script's background job (``cmd &``) passes SIGINT on ignored, and a single trial
    started so ignores Ctrl-C as a sweep's trial does (``guards.TrialStopper``)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("ranks", [1, 2])
def test_ctrl_c_ends_a_single_trial_with_130_in_one_line(tmp_path: Path, ranks: int) -> None:
    """SIGINT to the terminal's process group, as Ctrl-C sends it, once the trial's tree runs
    (its workers, its sampler; with two ranks, the ranks)."""
    overrides = with_tiny(
        [
            *FAULTY,
            *SIZES,
            "+dataset.mode=slow",
            "+dataset.delay_s=0.02",
            "loader.num_workers=1",
            "trial.steps=100000",
            f"++trial.nproc_per_node={ranks}",
        ]
    )
    args = [f"paths.output_root={tmp_path}", "tracking.enabled=false", "trial.host_lock=off"]
    proc = start_cli(
        tmp_path, *args, *overrides, start_new_session=True, preexec_fn=_as_from_a_terminal
    )
    try:
        tree = psutil.Process(proc.pid)
        running = 2 if ranks == 1 else 5  # a worker a rank, a sampler (and the ranks)
        deadline = time.monotonic() + 120
        while len(_descendants(tree)) < running and proc.poll() is None:
            assert time.monotonic() < deadline, "the trial's tree never started"
            time.sleep(0.2)
        time.sleep(1.0)  # steps under way
        seen = _descendants(tree)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == ExitStatus.INTERRUPTED, err
    assert err.strip().splitlines() == [
        "loadertune: interrupted: the trial stopped before its figure"
    ], err
    _, alive = psutil.wait_procs(seen, timeout=60)
    assert [p for p in alive if p.status() != psutil.STATUS_ZOMBIE] == []


@pytest.mark.parametrize("ranks", [1, 2])
def test_sigterm_ends_a_single_trial_killed_by_it(tmp_path: Path, ranks: int) -> None:
    """SIGTERM to the trial's process (``kill``, ``timeout``), once its tree runs: it ends by
    that signal with one rank or two (the launcher's handler takes it, then it is raised
    again), never as a bug blamed on the dataset, and nothing of its tree runs on."""
    overrides = with_tiny(
        [*FAULTY, *SIZES, "+dataset.mode=slow", "+dataset.delay_s=0.02",
         "loader.num_workers=1", "trial.steps=100000", f"++trial.nproc_per_node={ranks}"]
    )  # fmt: skip
    args = [f"paths.output_root={tmp_path}", "tracking.enabled=false", "trial.host_lock=off"]
    proc = start_cli(tmp_path, *args, *overrides, start_new_session=True)
    try:
        tree = psutil.Process(proc.pid)
        running = 2 if ranks == 1 else 5
        deadline = time.monotonic() + 120
        while len(_descendants(tree)) < running and proc.poll() is None:
            assert time.monotonic() < deadline, "the trial's tree never started"
            time.sleep(0.2)
        time.sleep(1.0)
        seen = _descendants(tree)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == -signal.SIGTERM, err
    assert "trial failed" not in err and "Traceback" not in err, err
    _, alive = psutil.wait_procs(seen, timeout=60)
    assert [p for p in alive if p.status() != psutil.STATUS_ZOMBIE] == []
