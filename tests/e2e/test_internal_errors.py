"""A failure raised inside loadertune's own code is loadertune's (``internal_error``, exit
status 70, its traceback whole, for a report), never the dataset's or the step's; and a batch
with no samples, which the timing could not divide by, is refused naming ``loader.collate_fn``.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import pytest
import torch

from loadertune.errors import ConfigError, ExitStatus
from loadertune.loader._step_loop import StepLoop
from loadertune.measure._accelerator import HostCopyTimer
from loadertune.measure._timing import StepTimer
from loadertune.models._batch import samples_in
from loadertune.record._failures import Reason, StepError, TrialFailure, classify, failed_status
from tests._cli import run_cli
from tests._sweeps import finished

FAST = ["dataset=custom", "dataset._target_=faulty_data.Faulty", "loader.batch_size=4",
        "trial.warmup_steps=1", "trial.steps=4"]  # fmt: skip
INTO_LOADERTUNE = ["model=custom", "model._target_=user_steps.step_into_loadertune_fault"]


def _traceback_of(call: Any) -> tuple[str, str]:
    """(type name, formatted traceback) of the exception ``call()`` raises."""
    try:
        call()
    except Exception as exc:
        return type(exc).__name__, "".join(traceback.format_exception(exc))
    raise AssertionError(f"{call} raised nothing")


def test_an_error_raised_in_loadertunes_code_is_loadertunes(fixtures_on_path: Path) -> None:
    from user_steps import IntoLoadertune

    assert classify(*_traceback_of(lambda: IntoLoadertune()[0])) == Reason.INTERNAL_ERROR
    assert failed_status(Reason.INTERNAL_ERROR) == ExitStatus.INTERNAL == 70


def test_the_users_and_the_datas_own_errors_stay_the_datasets(
    fixtures_on_path: Path, tmp_path: Path
) -> None:
    from faulty_data import Faulty

    from loadertune.datasets.array_shards import ArrayShardsDataset

    assert classify(*_traceback_of(lambda: Faulty(mode="raise")[0])) == Reason.DATASET_ERROR
    no_shards = _traceback_of(lambda: ArrayShardsDataset(tmp_path))  # a built-in's data check
    assert "loadertune/datasets" in no_shards[1]
    assert classify(*no_shards) == Reason.DATASET_ERROR


def test_a_workers_traceback_is_judged_by_the_workers_own_frames(fixtures_on_path: Path) -> None:
    from faulty_data import Faulty
    from user_steps import IntoLoadertune

    def first(dataset: Any) -> Any:
        return next(iter(torch.utils.data.DataLoader(dataset, num_workers=1)))

    ours = _traceback_of(lambda: first(IntoLoadertune()))
    assert "DataLoader worker" in ours[1]
    assert classify(*ours) == Reason.INTERNAL_ERROR
    assert classify(*_traceback_of(lambda: first(Faulty(mode="raise")))) == Reason.DATASET_ERROR


def _step_raising(step: Any) -> TrialFailure:
    loop = StepLoop([torch.zeros(2, 3)], torch.device("cpu"), False, step,
                    HostCopyTimer(lambda: None), samples_in)  # fmt: skip
    with pytest.raises(TrialFailure) as caught:
        loop.step(StepTimer())
    return caught.value


def test_a_step_that_meets_loadertunes_error_is_no_step_error(fixtures_on_path: Path) -> None:
    from user_steps import step_into_loadertune_fault, step_that_raises

    ours = _step_raising(step_into_loadertune_fault())
    assert ours.reason == Reason.INTERNAL_ERROR and not isinstance(ours, StepError)
    assert "bug in loadertune" in ours.message and "_timing.py" in ours.message
    assert isinstance(ours.__cause__, ValueError)
    assert isinstance(_step_raising(step_that_raises()), StepError)


def test_a_batch_without_samples_names_the_collate() -> None:
    assert samples_in((torch.zeros(3, 2), torch.zeros(3)), None) == 3
    assert samples_in({"ids": [[1], [2]], "mask": None}, None) == 2
    for batch in ([], {}, torch.zeros(0, 4), (torch.tensor(1.0),), "text", (object(),)):
        with pytest.raises(ConfigError, match=r"^loader.collate_fn=my.pad: made a batch"):
            samples_in(batch, "my.pad")


@pytest.mark.slow
def test_a_single_trial_with_loadertunes_error_says_so(
    fixtures_on_path: Path, tmp_path: Path
) -> None:
    proc = run_cli(tmp_path, f"paths.output_root={tmp_path}", *FAST, *INTO_LOADERTUNE)
    assert proc.returncode == ExitStatus.INTERNAL, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("loadertune: error: trial failed (internal_error): "), last
    assert "bug in loadertune" in last and "user's code" not in last
    assert "loadertune/measure/_timing.py" in proc.stderr  # the frames a report needs


@pytest.mark.slow
def test_a_sweep_stops_on_loadertunes_error_as_loadertunes(
    fixtures_on_path: Path, tmp_path: Path
) -> None:
    proc = run_cli(
        tmp_path, "-m", f"paths.output_root={tmp_path}", *FAST, *INTO_LOADERTUNE,
        "hydra.sweeper.n_trials=4", "hydra.sweeper.study_name=s",
        "hydra.sweeper.max_failure_rate=1.0", "hydra.sweeper.verdict_repeats=0",
        "loader.num_workers=choice(0,1)",
    )  # fmt: skip
    assert proc.returncode == ExitStatus.INTERNAL, proc.stderr[-3000:]
    out = " ".join(proc.stdout.split())
    assert "This is a bug in loadertune" in out and "bug in the dataset" not in out
    trials = finished(tmp_path)
    assert len(trials) == 2
    assert {t.user_attrs["reason"] for t in trials} == {"internal_error"}


@pytest.mark.slow
@pytest.mark.parametrize("collate", ["no_samples", "no_samples_later"])
def test_a_collate_whose_batch_has_no_samples_is_refused(
    fixtures_on_path: Path, tmp_path: Path, collate: str
) -> None:
    proc = run_cli(
        tmp_path, f"paths.output_root={tmp_path}", *FAST, "model=simulated",
        "model.step_ms=1", f"loader.collate_fn=user_steps.{collate}", "loader.num_workers=0",
    )  # fmt: skip
    assert proc.returncode == ExitStatus.BAD_INPUT, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"loadertune: error: loader.collate_fn=user_steps.{collate}: "), last
    assert "no samples to time" in last
