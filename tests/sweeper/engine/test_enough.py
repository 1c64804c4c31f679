"""When the sweep loop stops searching short of its budget: a ceiling reached is kept with the
study for the verdict's line, cleared on the next invocation, and never cuts a grid, a user's
own suggestions or a sweep that asked to measure on."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from hydra_plugins.loadertune_sweeper.config import SweepSettings
from hydra_plugins.loadertune_sweeper.engine._enough import forget_stop, nothing_left
from hydra_plugins.loadertune_sweeper.plan import _ceiling
from hydra_plugins.loadertune_sweeper.verdict import _candidates
from hydra_plugins.loadertune_sweeper.verdict._text import details
from tests.sweeper.plan.test_ceiling import HIDDEN, _add, _plan
from tests.sweeper.verdict.test_first_batch import _cand


def _study_at_the_ceiling(sampler: optuna.samplers.BaseSampler | None = None) -> optuna.Study:
    study = optuna.create_study(sampler=sampler)
    for row in HIDDEN:
        _add(study, row)
    return study


def test_a_ceiling_stops_the_search_and_is_kept_for_the_verdict(tmp_path: Path) -> None:
    study, plan = _study_at_the_ceiling(), _plan(tmp_path)
    note = nothing_left(study, plan, SweepSettings(), study.sampler, in_a_row=0)
    assert note is not None and note.startswith("stopping the search: num_workers=2 (trial 1)")
    kept = _ceiling.stopped_why(study)
    assert kept is not None and note.endswith(kept)
    # The study's next invocation searches on: the stop it made is not this one's.
    forget_stop(study)
    assert _ceiling.stopped_why(study) is None


@pytest.mark.parametrize(
    ("settings", "sampler"),
    [
        (SweepSettings(stop_at_ceiling=False), None),
        (SweepSettings(custom_search_space="my.suggest"), None),
        (SweepSettings(), optuna.samplers.GridSampler({"loader.num_workers": [0, 1, 2, 4]})),
    ],
    ids=["stop_at_ceiling=false", "custom_search_space", "exhaustive sampler"],
)
def test_the_ceiling_never_cuts_what_asked_for_every_point(
    tmp_path: Path, settings: SweepSettings, sampler: optuna.samplers.BaseSampler | None
) -> None:
    study = _study_at_the_ceiling(sampler)
    assert _ceiling.reached(study, _plan(tmp_path), 2) is not None  # the rule alone would
    assert nothing_left(study, _plan(tmp_path), settings, study.sampler, in_a_row=0) is None
    assert _ceiling.stopped_why(study) is None


def test_the_verdict_says_why_the_search_stopped_in_one_line() -> None:
    slow = _cand(0, [3.0, 3.1, 2.9], [0.05] * 3)
    fast = _cand(2, [1.0, 1.0, 1.01], [0.1] * 3)
    rec = _candidates.recommend([slow, fast])
    why = "num_workers=2 (trial 1) hides the loader: ..."
    lines = [t for t in details(rec, [slow, fast], stopped=why) if "stopped" in t]
    assert lines == [f"The search stopped before its trial budget: {why}."]
    assert not any("stopped" in t for t in details(rec, [slow, fast]))
