"""How a trial's failure is named: an exception's type and text, a process's exit code, a dead
worker's exit codes read as a reason word; errors grouped by type and place, not message."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch
import torch.utils.data as torch_data

from loadertune.record._failures import (
    INFEASIBLE,
    REASONS,
    Reason,
    TrialFailure,
    classify,
    classify_exit,
    error_signature,
)

WORKER_TRACEBACK = """Traceback (most recent call last):
  File "/v/torch/utils/data/dataloader.py", line 733, in __next__
    data = self._next_data()
ValueError: Caught ValueError in DataLoader worker process 0.
Original Traceback (most recent call last):
  File "/v/torch/utils/data/_utils/worker.py", line 349, in _worker_loop
    data = fetcher.fetch(index)
  File "/data/records.py", line 42, in __getitem__
    raise ValueError(f"corrupt record at index {index}")
ValueError: corrupt record at index {index}
"""


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        (WORKER_TRACEBACK.format(index=1468), WORKER_TRACEBACK.format(index=746), True),
        (WORKER_TRACEBACK, WORKER_TRACEBACK.replace("line 42", "line 43"), False),
        (WORKER_TRACEBACK, WORKER_TRACEBACK.replace("ValueError: corrupt", "KeyError: x"), False),
        ("KeyError: 'label 3'", "KeyError: 'label 9'", True),
        ("", "", True),
    ],
)
def test_errors_group_by_type_and_place_not_message(first: str, second: str, same: bool) -> None:
    assert (error_signature(first) == error_signature(second)) is same


def test_error_signature_names_type_and_innermost_frame() -> None:
    text = WORKER_TRACEBACK.format(index=3)
    assert error_signature(text) == "ValueError at records.py:42 in __getitem__"


@pytest.mark.parametrize(
    ("exc_type", "text", "reason"),
    [
        (
            "RuntimeError",
            "DataLoader worker (pid 12) is killed by signal: Bus error. It is "
            "possible that dataloader's workers are out of shared memory.",
            "shm_exhausted",
        ),
        ("RuntimeError", "DataLoader worker (pid 99) is killed by signal: Killed.", "worker_oom"),
        (
            "RuntimeError",
            "Too many open files. Communication with the workers is no longer possible.",
            "fd_exhausted",
        ),
        ("RuntimeError", "DataLoader worker (pid(s) 5, 6) exited unexpectedly", "worker_crashed"),
        (
            "RuntimeError",
            "DataLoader worker (pid 7) is killed by signal: Segmentation fault.",
            "worker_crashed",
        ),
        ("ValueError", "Caught ValueError in DataLoader worker process 2.", "dataset_error"),
        ("PicklingError", "Can't pickle <function <lambda>>", "unpicklable"),
        ("AttributeError", "Can't get local object 'f.<locals>.g'", "unpicklable"),
        ("ConfigError", "loader.batch_size=0: ...", "invalid_config"),
        ("OutOfMemoryError", "CUDA out of memory. Tried to allocate", "cuda_oom"),
        ("InfeasibleSetting", "[fd_exhausted] about 300 descriptors", "fd_exhausted"),
        ("KeyError", "'label'", "dataset_error"),
        ("MemoryError", "Traceback ...\nMemoryError", "memory_budget"),
        ("RuntimeError", "DefaultCPUAllocator: can't allocate memory: you tried", "memory_budget"),
    ],
)
def test_classification_table(exc_type: str, text: str, reason: str) -> None:
    assert classify(exc_type, text) == reason
    assert reason in REASONS


def test_exit_status_classification() -> None:
    assert classify_exit(-9) == "trial_killed"
    assert classify_exit(1) == "trial_crashed"
    assert "memory_budget" in INFEASIBLE and "timeout" not in INFEASIBLE


def test_a_reason_is_its_stored_word() -> None:
    """Optuna attrs, MLflow tags and messages get the word itself, as before the enum."""
    reason = classify("InfeasibleSetting", "[shm_exhausted] about 900 MB in flight")
    assert reason is Reason.SHM_EXHAUSTED
    assert str(reason) == f"{reason}" == "shm_exhausted" and type(str(reason)) is str
    assert json.dumps({"reason": reason}) == '{"reason": "shm_exhausted"}'
    assert str(TrialFailure(Reason.TIMEOUT, "hung")) == "[timeout] hung"
    assert set(REASONS) == set(Reason)  # each reason documented


@pytest.mark.parametrize(
    ("codes", "reason"),
    [
        ([None, None], None),
        ([0, None], None),
        ([None, -signal.SIGKILL], Reason.WORKER_OOM),
        ([-signal.SIGSEGV], Reason.WORKER_CRASHED),
        ([1], Reason.WORKER_CRASHED),
        ([-signal.SIGKILL, -signal.SIGBUS], Reason.SHM_EXHAUSTED),
    ],
)
def test_a_dead_workers_exit_code_names_how_it_died(
    codes: list[int | None], reason: Reason | None
) -> None:
    from loadertune.record._failures import worker_death

    assert worker_death(codes) == reason


class _KilledOnCue(torch_data.Dataset[int]):
    """Its worker SIGKILLs itself once ``cue`` exists, so the test decides when."""

    def __init__(self, cue: Path) -> None:
        self.cue = cue

    def __len__(self) -> int:
        return 1000

    def __getitem__(self, index: int) -> int:
        if self.cue.exists():
            os.kill(os.getpid(), signal.SIGKILL)
        return index


def test_a_worker_killed_unseen_by_pytorchs_sigchld_handler_is_still_out_of_memory(
    tmp_path: Path,
) -> None:
    """PyTorch's liveness check says only "exited unexpectedly"; the exit code says SIGKILL.

    Which of PyTorch's two checks sees a killed worker first is a race on a busy machine; the
    worker is taken off the SIGCHLD handler here so the quieter check is the one that answers.
    """
    from loadertune import _torch_private
    from loadertune.loader._step_loop import StepLoop, synchronizer
    from loadertune.measure._accelerator import copy_timer
    from loadertune.measure._timing import StepTimer

    cue = tmp_path / "cue"
    loader = torch_data.DataLoader(
        _KilledOnCue(cue), num_workers=1, prefetch_factor=1, multiprocessing_context="fork"
    )
    device = torch.device("cpu")
    loop = StepLoop(
        loader,
        device,
        False,
        lambda batch: None,
        copy_timer(device, synchronizer(device)),
        lambda batch, collate: 1,
    )
    loop.first_batch()
    _torch_private.unwatch_workers(loop._it)
    cue.touch()
    with pytest.raises(TrialFailure) as failure:
        for _ in range(50):
            loop.step(StepTimer())
    assert failure.value.reason is Reason.WORKER_OOM
    assert "exited unexpectedly" in str(failure.value)
    loop.close()
