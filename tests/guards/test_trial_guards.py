"""The guards inside a trial: errors workers only print, and the single trial's memory budget.

The real faults: a worker's queue feeder thread that runs out of a 1 MB ``/dev/shm`` (in a
private mount namespace), and a dataset that leaks in its workers past a small budget. The
pattern reader and the budget's pacing are tested on recorded output and readings.
"""

from __future__ import annotations

import itertools
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from loadertune.errors import ConfigError
from loadertune.guards._memory_watch import BudgetPacer
from loadertune.guards._worker_output import _Scanner, read_fault
from loadertune.record._failures import TrialFailure, classify
from tests._cli import SCRIPT, run_cli, trial_status

MB = 2**20

# Recorded: a worker's feeder thread failing to move a batch's tensors into a full /dev/shm.
SHM_FEEDER = """\
Traceback (most recent call last):
  File "/usr/lib/python3.11/multiprocessing/queues.py", line 244, in _feed
    obj = _ForkingPickler.dumps(obj)
          ^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/lib/python3.11/multiprocessing/reduction.py", line 51, in dumps
    cls(buf, protocol).dump(obj)
  File "/venv/lib/python3.11/site-packages/torch/multiprocessing/reductions.py", line 613, in reduce_storage
    fd, size = storage._share_fd_cpu_()
               ^^^^^^^^^^^^^^^^^^^^^^^^
  File "/venv/lib/python3.11/site-packages/torch/storage.py", line 527, in _share_fd_cpu_
    return super()._share_fd_cpu_(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
RuntimeError: unable to allocate shared memory(shm) for file </torch_6711_2762118014_126>: No space left on device (28)
"""  # noqa: E501
# Recorded: the same, under RLIMIT_NOFILE=256 (two workers' tracebacks, interleaved by line).
FD_FEEDER = """\
Traceback (most recent call last):
Traceback (most recent call last):
  File "/usr/lib/python3.11/multiprocessing/queues.py", line 244, in _feed
  File "/usr/lib/python3.11/multiprocessing/queues.py", line 244, in _feed
  File "/usr/lib/python3.11/multiprocessing/reduction.py", line 51, in dumps
  File "/venv/lib/python3.11/site-packages/torch/multiprocessing/reductions.py", line 614, in reduce_storage
  File "/usr/lib/python3.11/multiprocessing/reduction.py", line 198, in DupFd
  File "/usr/lib/python3.11/multiprocessing/resource_sharer.py", line 48, in __init__
OSError: [Errno 24] Too many open files
"""  # noqa: E501
# A worker that prints a traceback it handled itself, and a warning: nothing was lost.
HARMLESS = """\
/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py:627: UserWarning: This \
DataLoader will create 8 worker processes in total.
Traceback (most recent call last):
  File "/data/my_dataset.py", line 40, in __getitem__
    return self.decode(record)
ValueError: bad JPEG, using a blank image instead
"""
UNPICKLABLE_FEEDER = """\
Traceback (most recent call last):
  File "/usr/lib/python3.11/multiprocessing/queues.py", line 244, in _feed
    obj = _ForkingPickler.dumps(obj)
_pickle.PicklingError: Can't pickle <function <lambda> at 0x7f>: attribute lookup failed
"""


@pytest.mark.parametrize(
    ("printed", "reason", "last_line"),
    [
        (SHM_FEEDER, "shm_exhausted", "RuntimeError: unable to allocate shared memory(shm)"),
        (FD_FEEDER, "fd_exhausted", "OSError: [Errno 24] Too many open files"),
        (UNPICKLABLE_FEEDER, "unpicklable", "_pickle.PicklingError"),
        (
            "Fatal Python error: Bus error\n\nThread 0x7f (most recent call first):\n",
            "shm_exhausted",
            "Fatal Python error: Bus error",
        ),
        (HARMLESS + SHM_FEEDER, "shm_exhausted", "RuntimeError: unable to allocate"),
    ],
)
def test_fatal_worker_output_is_read_with_its_reason(
    printed: str, reason: str, last_line: str
) -> None:
    fault = read_fault(printed.splitlines())
    assert fault is not None
    assert fault.reason == reason
    assert last_line in fault.excerpt
    assert len(fault.excerpt.splitlines()) <= 12
    text = str(TrialFailure(fault.reason, fault.message()))
    assert classify("TrialFailure", f"Traceback...\n  x = batch[0]\n{text}") == reason


@pytest.mark.parametrize("printed", ["", HARMLESS, "loss 0.3\nstep 2\n"])
def test_harmless_output_is_no_fault(printed: str) -> None:
    assert read_fault(printed.splitlines()) is None


def test_scanner_waits_for_the_whole_traceback_then_reports_once() -> None:
    scanner = _Scanner()
    lines = SHM_FEEDER.splitlines(keepends=True)
    scanner.feed("".join(lines[:3]), now=10.0)  # the _feed frame: a sign, not yet the error
    assert scanner.due(10.01) is None
    scanner.feed("".join(lines[3:]), now=10.02)  # the traceback's last line arrived
    fault = scanner.due(10.02)
    assert fault is not None and fault.reason == "shm_exhausted"
    assert scanner.due(11.0) is None  # once


def test_scanner_reports_a_sign_without_its_end_after_settling() -> None:
    scanner = _Scanner()
    scanner.feed("Too many open files. Communication with the workers is no ", now=5.0)
    assert scanner.due(5.0) is None  # not even a whole line yet
    scanner.feed("longer possible.\nmore\n", now=5.0)
    assert scanner.due(5.1) is None
    fault = scanner.due(5.0 + 1.0)
    assert fault is not None and fault.reason == "fd_exhausted"


def _reads(pss: int) -> Callable[[], int]:
    return lambda: pss


def _tree(rss: int, *pids: int) -> dict[int, int]:
    """``rss`` bytes spread over the members ``pids``, as the pacer reads them."""
    return {pid: rss // len(pids) for pid in pids}


def _grow(pacer: BudgetPacer, rss: list[int], pss_gap: int, step_s: float) -> list[int]:
    """Feed ``rss`` readings ``step_s`` apart (PSS = RSS - gap); the readings seen until stop."""
    seen = []
    for i, value in enumerate(rss):
        seen.append(value)
        if pacer.observe(i * step_s, _tree(value, 1, 2, 3), _reads(value - pss_gap)):
            break
    return seen


@pytest.mark.parametrize("mb_per_s", [100, 1300, 2500])
def test_the_pacer_stops_a_steady_leak_before_it_passes_the_budget(mb_per_s: int) -> None:
    """Simulated time: the tree grows steadily from the start (its rate unknown at first),
    read when the pacer asks, 5 ms late."""
    budget, shared = 800 * MB, 200 * MB
    pacer = BudgetPacer(budget)
    t = 0.0
    while True:
        rss = 300 * MB + int(mb_per_s * MB * t)
        if pacer.observe(t, _tree(rss, 1, 2, 3), _reads(rss - shared)):
            break
        t += pacer.next_in + 0.005
        assert t < 60
    assert 0.85 * budget < rss - shared <= budget


def test_the_pacer_leaves_a_steady_tree_alone_and_samples_it_slowly() -> None:
    pacer = BudgetPacer(800 * MB)
    assert _grow(pacer, [600 * MB] * 50, 300 * MB, 0.25) == [600 * MB] * 50
    assert pacer.next_in >= 0.2
    assert pacer.peak == 300 * MB


def test_a_new_worker_sharing_the_parents_pages_is_no_leak() -> None:
    pacer = BudgetPacer(800 * MB)
    assert not pacer.observe(0.0, _tree(300 * MB, 1), lambda: 300 * MB)
    # a forked worker: summed RSS doubles, PSS barely moves; its pid makes PSS read again
    assert not pacer.observe(0.05, _tree(600 * MB, 1, 2), lambda: 310 * MB)
    assert not pacer.observe(0.10, _tree(600 * MB, 1, 2), lambda: 310 * MB)


def test_inside_the_trial_pss_is_not_read_far_from_the_budget() -> None:
    reads: list[int] = []

    def read_pss(value: int) -> Callable[[], int]:
        def read() -> int:
            reads.append(value)
            return value

        return read

    pacer = BudgetPacer(800 * MB, pss_far_s=None)
    for i in range(20):  # summed RSS, an upper bound of PSS, stays under half the budget
        pacer.observe(i * 0.25, _tree(390 * MB, 1, i + 2), read_pss(0))
    assert reads == []
    pacer.observe(5.0, _tree(500 * MB, 1, 2), read_pss(300 * MB))
    assert reads == [300 * MB]
    assert pacer.estimate == 300 * MB


def test_far_from_the_budget_pss_readings_are_paced_by_their_cost() -> None:
    """A PSS reading of a PyTorch tree takes tens of milliseconds: far from the budget the
    sweep reads it at most PSS_CPU_SHARE of the time; near it, as often as it needs."""
    from loadertune.guards._memory_watch import PSS_CPU_SHARE

    reads: list[float] = []
    cost = 0.02  # seconds one reading takes here

    def slow_read(now: float, value: int) -> Callable[[], int]:
        def read() -> int:
            reads.append(now)
            time.sleep(cost)
            return value

        return read

    pacer = BudgetPacer(1000 * MB)  # the sweep's guard: PSS far from the budget too
    for i in range(12):  # every quarter second, a new worker each time, far from the budget
        now = i * 0.25
        pacer.observe(now, _tree(300 * MB, 1, i + 2), slow_read(now, 200 * MB))
    gap = cost / PSS_CPU_SHARE
    assert reads[0] == 0.0 and len(reads) <= 1 + 3.0 / gap
    assert all(b - a >= gap for a, b in itertools.pairwise(reads))
    reads.clear()
    for i in range(4):  # over half the budget: read on every change of members
        now = 10.0 + i * 0.05
        pacer.observe(now, _tree(700 * MB, 1, 100 + i), slow_read(now, 650 * MB))
    assert len(reads) == 4


def test_the_pacer_samples_faster_near_the_budget() -> None:
    pacer = BudgetPacer(1000 * MB)
    pacer.observe(0.0, _tree(100 * MB, 1), lambda: 100 * MB)
    far = pacer.next_in
    pacer.observe(0.25, _tree(600 * MB, 1), lambda: 600 * MB)
    assert pacer.next_in < far


def test_a_memory_budget_must_be_positive(compose: object) -> None:
    from loadertune.checks._validation import validate
    from loadertune.config._typed import to_run_config

    cfg = compose(["trial.memory_budget_mb=0"])  # type: ignore[operator]
    with pytest.raises(ConfigError, match=r"trial\.memory_budget_mb"):
        validate(to_run_config(cfg))


SMALL = [
    "model=simulated",
    "model.step_ms=1",
    "loader.num_workers=2",
    "loader.batch_size=4",
    "trial.warmup_steps=1",
    "trial.steps=8",
]


def _private_shm() -> list[str]:
    """A command prefix that runs its command with a 1 MB /dev/shm of its own (as root)."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare here")
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1M tmpfs /dev/shm"],
        capture_output=True,
    )
    if probe.returncode:
        pytest.skip("cannot mount a private /dev/shm here (needs root or user namespaces)")
    return [
        "unshare",
        "-m",
        "sh",
        "-c",
        'mount -t tmpfs -o size=1M tmpfs /dev/shm && exec "$@"',
        "sh",
    ]


def test_a_worker_out_of_shared_memory_fails_the_trial(tmp_path: Path) -> None:
    status, err = trial_status(
        tmp_path,
        "dataset=custom",
        "dataset._target_=guard_data.ManyLeaves",
        *SMALL,
        wrap=_private_shm(),
    )
    last = err.strip().splitlines()[-1]
    assert status == 3, err
    assert "trial failed (shm_exhausted)" in last
    assert "/dev/shm" in last  # the fix
    assert "unable to allocate shared memory(shm)" in err  # what the worker printed
    assert "Traceback" not in err.split("what it printed:")[-1].split("loadertune: error")[-1]


def _open_files_limit(n: int) -> Callable[[], None]:
    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))

    return lower


def test_a_worker_out_of_file_descriptors_fails_the_trial(tmp_path: Path) -> None:
    # One batch in flight: the pre-start estimate (64 + 8 + 302 descriptors) fits under 400,
    # but the worker's feeder thread needs two descriptors a tensor while it sends them.
    status, err = trial_status(
        tmp_path,
        "dataset=custom",
        "dataset._target_=guard_data.ManyLeaves",
        *SMALL,
        "loader.num_workers=1",
        "loader.prefetch_factor=1",
        preexec=_open_files_limit(400),
    )
    last = err.strip().splitlines()[-1]
    assert status == 3, err
    assert "trial failed (fd_exhausted)" in last
    assert "ulimit -n" in last
    assert "Too many open files" in err.split("what it printed:")[-1]


def test_a_single_trial_past_its_memory_budget_is_stopped(tmp_path: Path) -> None:
    status, err = trial_status(
        tmp_path,
        "dataset=custom",
        "dataset._target_=faulty_data.Faulty",
        "+dataset.mode=leak",
        "+dataset.leak_mb=40",
        *SMALL,
        "trial.steps=400",
        "trial.memory_budget_mb=600",
    )
    last = err.strip().splitlines()[-1]
    assert status == 3, err
    assert "trial failed (memory_budget)" in last
    assert "memory budget of 600 MB" in last
    assert "trial.memory_budget_mb" in last
    assert "Traceback" not in err


STOPPER = """
import signal, sys, threading, time
from loadertune.record._failures import TrialFailure
from loadertune.guards._trial_stop import TrialStopper

block, hard = sys.argv[1] == "block", sys.argv[2] == "hard"
try:
    with TrialStopper(grace_s=0.5) as stopper:
        if block:  # as a main thread stuck in one long C call: the handler cannot run
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        threading.Thread(target=stopper.stop, args=("memory_budget", "over", hard)).start()
        try:
            time.sleep(3600)  # a blocking wait, as for a batch that never comes
        except Exception:
            pass  # code that swallows errors does not swallow the stop
    print("measured")
except TrialFailure as exc:
    print(f"failed {exc.reason}")
"""


@pytest.mark.parametrize(
    ("how", "status", "out", "err"),
    [
        (["wait", "hard"], 0, "failed memory_budget", ""),
        (["wait", "soft"], 0, "failed memory_budget", ""),
        (["block", "hard"], 3, "", "loadertune: error: [memory_budget] over"),
    ],
)
def test_a_stop_fails_the_main_thread_or_ends_the_process(
    how: list[str], status: int, out: str, err: str
) -> None:
    # The stop ends the wait at once; the limit only bounds a stop that never comes, far past
    # what start-up takes on a loaded machine (over 60 s once, at a load average above 30).
    proc = subprocess.run(
        [sys.executable, "-c", STOPPER, *how], capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == status, proc.stderr
    assert proc.stdout.strip() == out
    assert proc.stderr.strip().endswith(err)


def test_a_sweep_trial_whose_worker_ran_out_of_shared_memory_is_pruned(tmp_path: Path) -> None:
    import optuna
    from optuna.trial import TrialState

    wrap = _private_shm()
    sweep = [
        "-m",
        f"paths.output_root={tmp_path}",
        "tracking.enabled=false",
        "dataset=custom",
        "dataset._target_=guard_data.ManyLeaves",
        *SMALL,
        "loader.prefetch_factor=choice(2,3)",
        "hydra.sweeper.study_name=s",
        "hydra.sweeper.n_trials=1",
        "hydra.sweeper.verdict_repeats=0",
        "hydra.sweeper.host_lock=off",
    ]
    proc = run_cli(tmp_path, *sweep, timeout=300, command=[*wrap, SCRIPT])
    assert proc.returncode == 3, proc.stderr  # nothing to recommend
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    (trial,) = optuna.load_study(study_name="s", storage=storage).trials
    assert trial.state == TrialState.PRUNED
    assert trial.user_attrs["reason"] == "shm_exhausted"
    assert "unable to allocate shared memory(shm)" in trial.user_attrs["error"]
