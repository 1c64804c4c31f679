"""An exception in the user's training step is a step error, named with the step, not a
bug in the dataset: the trial's reason, the sweep's stop (exit 4) and its message say so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from loadertune.errors import ExitStatus
from loadertune.loader._step_loop import StepLoop
from loadertune.measure._accelerator import HostCopyTimer
from loadertune.measure._timing import StepTimer
from loadertune.models._batch import samples_in
from loadertune.record._failures import REASONS, USER_BUGS, Reason, StepError, classify
from tests._cli import run_cli
from tests._sweeps import finished

FAST = [
    "dataset=custom",
    "dataset._target_=faulty_data.Faulty",
    "model=custom",
    "model._target_=user_steps.step_that_raises",
    "loader.batch_size=4",
    "trial.warmup_steps=1",
    "trial.steps=4",
    "hydra.sweeper.study_name=s",
    "hydra.sweeper.max_failure_rate=1.0",
    "hydra.sweeper.verdict_repeats=0",
]


def _raise_in_step(err: BaseException) -> StepError:
    def step(batch: Any) -> None:
        raise err

    loop = StepLoop([torch.zeros(2, 3)], torch.device("cpu"), False, step,
                    HostCopyTimer(lambda: None), samples_in)  # fmt: skip
    with pytest.raises(StepError) as caught:
        loop.step(StepTimer())
    assert caught.value.__cause__ is err
    return caught.value


def test_a_steps_exception_is_a_step_error_naming_the_step_and_place() -> None:
    failure = _raise_in_step(ValueError("bad shapes"))
    text = str(failure)
    assert text.startswith("[step_error] the training step (")
    assert "raised ValueError at " in text and __file__ in text and "in step" in text
    assert classify("StepError", text) == Reason.STEP_ERROR
    assert Reason.STEP_ERROR in REASONS and Reason.STEP_ERROR in USER_BUGS


def test_a_step_out_of_memory_keeps_its_own_reason() -> None:
    failure = _raise_in_step(RuntimeError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert classify("StepError", str(failure)) == Reason.CUDA_OOM


@pytest.mark.slow
def test_a_broken_step_stops_the_sweep_as_a_step_bug(tmp_path: Path) -> None:
    proc = run_cli(
        tmp_path, "-m", f"paths.output_root={tmp_path}", *FAST, "hydra.sweeper.n_trials=4",
        "+dataset.mode=ok", "loader.num_workers=choice(0,1)",
    )  # fmt: skip
    assert proc.returncode == ExitStatus.DATASET_BUG, proc.stderr[-3000:]
    out = " ".join(proc.stdout.split())
    assert "bug in the training step (model.*)" in out
    assert "bug in the dataset" not in out
    assert "ZeroDivisionError" in out
    trials = finished(tmp_path)
    assert len(trials) == 2
    assert {t.user_attrs["reason"] for t in trials} == {"step_error"}
    assert all("model._target_=user_steps.step_that_raises" in t.user_attrs["error"]
               for t in trials)  # fmt: skip
