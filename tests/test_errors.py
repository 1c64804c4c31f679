"""One mapping from an error to the status a command exits with, whichever command ends on it
(a single trial, a sweep, the fan-out over hosts): each error says its own."""

from __future__ import annotations

import pytest

from loadertune.checks._host_lock import HostBusy
from loadertune.errors import ConfigError, ExitStatus, status_of
from loadertune.record._failures import InfeasibleSetting, Reason, StepError, TrialFailure
from loadertune.record._result_stores import StoreUnavailable


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (ConfigError("loader.num_workers", -1, "must be >= 0", "e.g. 2"), ExitStatus.BAD_INPUT),
        (InfeasibleSetting(Reason.SHM_EXHAUSTED, "needs 9 GB of /dev/shm"), ExitStatus.BAD_INPUT),
        (HostBusy("a sweep holds this host"), ExitStatus.BUSY),
        (StoreUnavailable("the disk is full"), ExitStatus.INFRASTRUCTURE),
        (TrialFailure(Reason.DATASET_ERROR, "KeyError at data.py:3"), ExitStatus.DATASET_BUG),
        (StepError("model.step", ValueError("bad shape")), ExitStatus.DATASET_BUG),
        (TrialFailure(Reason.TIMEOUT, "no progress"), ExitStatus.NO_RESULT),
        (KeyboardInterrupt(), ExitStatus.INTERRUPTED),
        (SystemExit(4), ExitStatus.DATASET_BUG),  # a sweep worker's own ending
        (SystemExit(75), ExitStatus.BUSY),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_each_error_ends_a_command_with_its_own_status(
    error: BaseException, status: ExitStatus
) -> None:
    assert status_of(error) is status


@pytest.mark.parametrize("error", [ValueError("a bug of ours"), SystemExit(1), SystemExit("x")])
def test_anything_else_gets_the_callers_default(error: BaseException) -> None:
    assert status_of(error) is ExitStatus.NO_RESULT
    assert status_of(error, ExitStatus.INFRASTRUCTURE) is ExitStatus.INFRASTRUCTURE


def test_every_status_is_in_the_readmes_table() -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for status in ExitStatus:
        assert f"| {int(status)} |" in readme, status
