"""Faults past the trial, end to end: two timing processes on one host, dead sweeps'
leftovers, limits that refuse a setting, stores that cannot work, and exit statuses that tell
each ending apart. (The units behind them: ``checks/test_host_lock.py``,
``checks/test_preflight.py``, ``record/test_failures.py``, ``record/test_result_stores.py``.)

Every case injects the real fault: a second process, a real ``kill -9`` in the verdict, a
dataset that raises on some indices, a dead port, a read-only output root.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from optuna.trial import TrialState

from loadertune.errors import ExitStatus
from tests._cli import SCRIPT, run_cli, run_main
from tests._processes import processes_under
from tests._sweeps import (
    FAULTY,
    SLOW,
    faulty_sweep,
    finished,
    mlflow_runs,
    running_trial,
    study_at,
    wait_for,
)
from tests.conftest import lacking

# ---- one timing process per host ------------------------------------------------------------


def _trial(out: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    return run_cli(out, f"paths.output_root={out}", *overrides, timeout=300)


def _wait_or_show(proc: subprocess.Popen[str], predicate: Any, timeout: float = 120.0) -> None:
    """Wait for ``predicate``; if it never holds, stop ``proc`` and fail with what it said."""
    try:
        wait_for(predicate, timeout)
    except AssertionError:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(
            f"not in time; the sweep said:\n{out[-3000:]}\n{err[-3000:]}"
        ) from None


@pytest.mark.slow
def test_a_second_sweep_waits_and_a_trial_is_refused_while_one_times(tmp_path: Path) -> None:
    """Two sweeps of one study started together never time at the same time."""
    # Three settings, three long trials: the refused trial below starts well before this
    # sweep can end.
    space = [*SLOW, "loader.prefetch_factor=choice(1,2)"]
    first = faulty_sweep(tmp_path, "hydra.sweeper.n_trials=3", *space, wait=False)
    _wait_or_show(first, lambda: running_trial(tmp_path))
    refused = _trial(tmp_path, "trial.host_lock=refuse", "model=simulated", "trial.steps=4")
    assert refused.returncode == ExitStatus.BUSY, refused.stderr
    assert "a sweep of study 's'" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    second = faulty_sweep(
        tmp_path,
        "hydra.sweeper.n_trials=1",
        *space,
        "trial.steps=8",
        "trial.max_steps=8",
        wait=False,
    )
    _, err2 = second.communicate(timeout=600)
    first.communicate(timeout=600)
    assert (first.returncode, second.returncode) == (0, 0), err2
    assert "waiting: this host is timing a sweep of study 's'" in err2
    spans = sorted(
        (t.datetime_start.timestamp(), t.datetime_complete.timestamp())
        for t in finished(tmp_path)
        if "repeat_of" not in t.user_attrs and t.datetime_start and t.datetime_complete
    )
    assert len(spans) >= 3
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end <= start  # no two measured trials overlap


# ---- stores that cannot work ----------------------------------------------------------------


def test_an_unreachable_tracking_server_is_one_line_before_anything(tmp_path: Path) -> None:
    env = {**os.environ, "MLFLOW_TRACKING_URI": "http://127.0.0.1:9"}
    started = time.monotonic()
    args = ["-m", f"paths.output_root={tmp_path}", "hydra.sweeper.study_name=s"]
    proc = run_cli(tmp_path, *args, env=env, timeout=120)
    assert proc.returncode == ExitStatus.INFRASTRUCTURE, proc.stderr
    assert "http://127.0.0.1:9 does not answer" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert time.monotonic() - started < 60  # not minutes of retries
    assert not (tmp_path / "optuna.db").exists()  # no study with waiting trials left


@pytest.mark.parametrize(
    ("mount_options", "expected"),
    [("size=2m", "only 2 MB free on its disk"), ("ro,size=64m", "cannot write there")],
)
def test_a_full_or_read_only_output_root_is_one_line(
    tmp_path: Path, mount_options: str, expected: str
) -> None:
    """A tiny tmpfs, or a read-only one, as the output root, in a private mount namespace."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        lacking("needs root and unshare for a private mount namespace")
    root = tmp_path / "root"
    root.mkdir()
    command = (
        f"mount -t tmpfs -o {mount_options} tmpfs {root} || exit 99; "
        f"exec {SCRIPT} paths.output_root={root} model=simulated trial.steps=4"
    )
    wrapped = ["unshare", "-m", "sh", "-c", command]
    proc = run_cli(tmp_path, env=os.environ, timeout=120, command=wrapped)
    if proc.returncode == 99:
        lacking(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    assert proc.returncode == ExitStatus.INFRASTRUCTURE, proc.stderr
    assert f"paths.output_root={root}: {expected}" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


# ---- exit statuses, and what a dead sweep left behind ----------------------------------------


@pytest.mark.slow
def test_all_trials_failing_exits_3_and_shows_the_error(tmp_path: Path) -> None:
    proc = faulty_sweep(
        tmp_path,
        "hydra.sweeper.n_trials=2",
        "+dataset.mode=segfault",
        "loader.num_workers=choice(1,2)",
    )
    out, err = proc.communicate()
    assert proc.returncode == ExitStatus.NO_RESULT, err
    assert "failed (worker_crashed); its error ends:" in out
    assert {t.state for t in finished(tmp_path)} == {TrialState.FAIL}


@pytest.mark.slow
def test_a_verdict_cut_by_kill_9_is_finished_on_the_next_start(tmp_path: Path) -> None:
    args = [
        "hydra.sweeper.n_trials=2",
        "+dataset.mode=slow",
        "+dataset.delay_s=0.02",
        "trial.steps=10",
        "loader.num_workers=choice(0,1)",
        "hydra.sweeper.verdict_repeats=2",
    ]
    proc = faulty_sweep(tmp_path, *args, wait=False)
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "verdict: measuring" in line:
            break
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)  # the sweep process, in its verdict
    _, first_err = proc.communicate()
    assert proc.returncode == -signal.SIGKILL, "".join(seen) + first_err
    wait_for(lambda: not processes_under(tmp_path), timeout=120)
    study = study_at(tmp_path)
    assert study.user_attrs.get("verdict") == "started", "".join(seen) + first_err
    trials_before = len(study.trials)
    assert not list(tmp_path.glob("multirun/*/*/best_loader.yaml"))

    again = faulty_sweep(tmp_path, *args)
    out, err = again.communicate()
    assert again.returncode == ExitStatus.OK, err
    assert "finishing the verdict now, before any new trial" in out
    assert len(study_at(tmp_path).trials) == trials_before  # no new trial
    parents, children, client = mlflow_runs(tmp_path)
    assert all(r.info.status != "RUNNING" for r in [*parents, *children])
    statuses = sorted(p.info.status for p in parents)
    assert statuses == ["FINISHED", "KILLED"]
    killed = next(p for p in parents if p.info.status == "KILLED")
    assert "loadertune.closed" in client.get_run(killed.info.run_id).data.tags


@pytest.mark.slow
def test_baselines_come_back_after_a_dataset_fix(tmp_path: Path) -> None:
    broken = faulty_sweep(tmp_path, "hydra.sweeper.n_trials=4", "+dataset.mode=raise")
    broken.communicate()
    assert broken.returncode == ExitStatus.DATASET_BUG
    fixed = faulty_sweep(tmp_path, "hydra.sweeper.n_trials=3", "+dataset.mode=ok")
    out, err = fixed.communicate()
    assert fixed.returncode == ExitStatus.OK, err
    assert "queued again, missing from the resumed study: default (0 workers)" in out
    default = [
        t
        for t in finished(tmp_path)
        if t.user_attrs.get("baseline") == "default" and t.state == TrialState.COMPLETE
    ]
    assert default


SMALL_SHM = ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm || exit 99"]
FEW_FDS = ["sh", "-c", "ulimit -n 100 || exit 99"]


@pytest.mark.parametrize(
    ("limit", "reason"), [(SMALL_SHM, "shm_exhausted"), (FEW_FDS, "fd_exhausted")]
)
def test_predicted_shm_and_descriptor_exhaustion_refused_before_workers(
    tmp_path: Path, limit: list[str], reason: str
) -> None:
    """A 1 MB /dev/shm (private mount namespace) and 100 descriptors: refused by the
    prediction, before any worker starts, in one line naming the reason and the fix."""
    if limit[0] == "unshare" and (shutil.which("unshare") is None or os.geteuid() != 0):
        lacking("needs root and unshare for a private /dev/shm")
    args = [
        SCRIPT,
        f"paths.output_root={tmp_path}",
        "model=simulated",
        "trial.steps=4",
        "loader.num_workers=4",
        "loader.prefetch_factor=8",
        "tracking.enabled=false",
    ]
    command = [*limit[:-1], limit[-1] + '; exec "$@"', "-", *args]
    proc = run_cli(tmp_path, env=os.environ, timeout=300, command=command)
    if proc.returncode == 99:
        lacking(f"cannot set the limit here: {proc.stderr.strip()}")
    assert proc.returncode == ExitStatus.BAD_INPUT, proc.stderr
    assert f"[{reason}]" in proc.stderr
    assert "lower loader.num_workers" in proc.stderr


@pytest.mark.slow
def test_invalid_settings_and_a_crashed_trial_process_in_both_stores(tmp_path: Path) -> None:
    """A batch size the dataset cannot fill (invalid_config, refused in the trial before any
    worker) and a trial process that exits 3 with no Python error (trial_crashed)."""
    import optuna

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'optuna.db'}", study_name="s")
    for mode, batch in (("ok", 4), ("ok", 1000), ("exit_trial", 4)):
        study.enqueue_trial({"+dataset.mode": mode, "loader.batch_size": batch})
    proc = faulty_sweep(
        tmp_path,
        "hydra.sweeper.n_trials=3",
        "+dataset.mode=choice(ok,exit_trial)",
        "loader.batch_size=choice(4,1000)",
        "loader.num_workers=0",
    )
    _, err = proc.communicate()
    assert proc.returncode == ExitStatus.OK, err
    trials = [t for t in study_at(tmp_path).trials if "+dataset.mode" in t.params][:3]
    got = [(t.state, t.user_attrs.get("reason")) for t in trials]
    assert got == [
        (TrialState.COMPLETE, None),
        (TrialState.PRUNED, "invalid_config"),
        (TrialState.FAIL, "trial_crashed"),
    ]
    assert "loader.batch_size=1000" in trials[1].user_attrs["error"]
    _, children, _ = mlflow_runs(tmp_path)
    by_number = {int(c.data.tags["optuna.trial_number"]): c for c in children}
    statuses = [
        (by_number[t.number].info.status, by_number[t.number].data.tags.get("reason"))
        for t in trials
    ]
    assert statuses == [
        ("FINISHED", None),
        ("KILLED", "invalid_config"),
        ("FAILED", "trial_crashed"),
    ]


FAULTY_ARGS = [
    *FAULTY,
    "hydra.sweeper.n_trials=3",
    "+dataset.mode=slow",
    "+dataset.delay_s=0.02",
    "trial.steps=20",
    "loader.num_workers=choice(0,1)",
]
FILL_MID_SWEEP = r"""
root=$1; out=$2; py=$3; shift 3
mount -t tmpfs -o size=64m tmpfs "$root" || exit 99
"$@" > "$out/first.out" 2> "$out/first.err" &
pid=$!
"$py" - "$root" <<'PY'
import sqlite3, sys, time
db = f"file:{sys.argv[1]}/optuna.db?mode=ro"  # read-only: never races the sweep's schema
for _ in range(600):
    try:
        with sqlite3.connect(db, uri=True, timeout=1) as con:
            if ("COMPLETE",) in con.execute("SELECT state FROM trials").fetchall():
                break
    except sqlite3.Error:
        pass
    time.sleep(0.2)
PY
dd if=/dev/zero of="$root/fill" bs=1M 2>/dev/null
wait $pid; echo $? > "$out/first.rc"
ls -la "$root" > "$out/after_crash.ls"
find "$root" \( -name optimization_results.yaml -o -name best_loader.yaml -o -name best.yaml \
  -o -name verdict.md \) -size 0 > "$out/empty_files"
rm -f "$root/fill"
"$@" > "$out/second.out" 2> "$out/second.err"; echo $? > "$out/second.rc"
cp "$root/optuna.db" "$root/mlflow.db" "$out/"
"""


@pytest.mark.slow
def test_a_disk_that_fills_mid_sweep_ends_in_one_line_and_the_rerun_repairs(
    tmp_path: Path,
) -> None:
    """A 64 MB tmpfs output root filled to the last byte after the first trial: one line,
    exit status 5, no empty result file; freed and rerun, nothing is left RUNNING."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare for a private tmpfs")
    root = tmp_path / "root"
    root.mkdir()
    sweep = [SCRIPT, "-m", f"paths.output_root={root}", *FAULTY_ARGS]
    shell = ["-m", "sh", "-c", FILL_MID_SWEEP, "-", str(root), str(tmp_path), sys.executable]
    proc = run_cli(tmp_path, command=["unshare", *shell, *sweep])
    if proc.returncode == 99:
        lacking(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    first_err = (tmp_path / "first.err").read_text()
    assert (tmp_path / "first.rc").read_text().strip() == str(int(ExitStatus.INFRASTRUCTURE)), (
        first_err
    )
    assert "the disk is full" in first_err
    assert len(first_err.strip().splitlines()) <= 3, first_err
    assert (tmp_path / "empty_files").read_text().strip() == ""
    second_err = (tmp_path / "second.err").read_text()
    assert (tmp_path / "second.rc").read_text().strip() == "0", second_err
    parents, children, _ = mlflow_runs(tmp_path)
    assert all(r.info.status != "RUNNING" for r in [*parents, *children])
    assert "FINISHED" in {p.info.status for p in parents}


@pytest.mark.slow
def test_a_changed_choice_list_is_one_line_not_a_traceback(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    fixtures_on_path: Path,
) -> None:
    """Optuna refuses a categorical whose choices changed; the sweep says so before a trial
    (the second sweep, a refusal, is the command's main run in-process)."""
    first = faulty_sweep(tmp_path, "hydra.sweeper.n_trials=1", "+dataset.mode=choice(ok)")
    first.communicate()
    assert first.returncode == 0
    before = len(study_at(tmp_path).trials)
    changed = ["hydra.sweeper.n_trials=1", "+dataset.mode=choice(ok,slow)"]
    status = run_main(
        monkeypatch, tmp_path, "-m", f"paths.output_root={tmp_path}", *FAULTY, *changed
    )
    err = capsys.readouterr().err
    assert status == ExitStatus.BAD_INPUT, err
    assert "dataset.mode: study 's' was measured with ('ok',)" in err
    assert "hydra.sweeper.study_name" in err
    assert "Traceback" not in err
    assert len(study_at(tmp_path).trials) == before  # nothing asked, nothing queued
