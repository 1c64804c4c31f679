"""What every trial's timed window must hold, however long ``trial.precision`` keeps it open."""

from __future__ import annotations

from loadertune.measure._precision import MAX_STEPS_FACTOR
from loadertune.record._result import TrialResult


def assert_whole_window(result: TrialResult, steps: int, batch_size: int) -> None:
    """The window timed ``steps`` steps or more (up to the default cap), each a whole batch.

    With ``trial.precision`` set, a trial stops timing once its rate is known well enough, so
    the count depends on how steady this machine was: only its bounds are fixed.
    """
    timed = result.summary.steps
    assert steps <= timed <= MAX_STEPS_FACTOR * steps, timed
    assert result.summary.samples == batch_size * timed
