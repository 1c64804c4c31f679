"""The words and lines a person reads after a sweep: the pick, its order, where to look."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from optuna.distributions import IntDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial

from hydra_plugins.loadertune_sweeper.plan._baselines import Role
from hydra_plugins.loadertune_sweeper.record._console import outcome_lines, table_rows
from hydra_plugins.loadertune_sweeper.verdict import _candidates
from hydra_plugins.loadertune_sweeper.verdict._text import ORDER, details, verdict_markdown
from loadertune.record._report import WIDE, wide_console
from loadertune.record._tracking import param_text, ui_hint


def _cand(
    workers: int, search_ms: float, repeats: list[float], roles: list[Role]
) -> _candidates.Candidate:
    trial = create_trial(
        params={"loader.num_workers": workers},
        distributions={"loader.num_workers": IntDistribution(0, 8)},
        value=search_ms,
    )
    c = _candidates.Candidate(trial, roles)
    c.values, c.rounds = repeats, list(range(len(repeats)))
    c.samples_per_s = [1000 / v for v in repeats]
    return c


def test_no_speed_up_over_the_advice_the_pick_stands_for() -> None:
    default = _cand(0, 1.0, [1.00, 1.01, 0.99], [Role.DEFAULT])
    more = _cand(4, 1.0, [1.00, 1.02, 1.01], [Role.RULE_OF_THUMB])
    rec = _candidates.recommend([default, more])
    assert rec.chosen is default  # as fast, and cheaper
    text = "\n".join(details(rec, [default, more]))
    assert "speed-up over default" not in text
    assert Role.DEFAULT in rec.speedups  # measured, and left unsaid


def test_candidates_are_listed_in_the_search_order() -> None:
    top2 = _cand(4, 1.1, [0.9, 0.9, 0.9], [])
    top2.rank = 2
    top1 = _cand(6, 1.0, [1.0, 1.0, 1.0], [])
    top1.rank = 1
    default = _cand(0, 2.0, [2.0, 2.1, 1.9], [Role.DEFAULT])
    cands = [default, top2, top1]
    rec = _candidates.recommend(cands)
    from hydra_plugins.loadertune_sweeper.verdict._confidence import assess

    text = verdict_markdown(rec, cands, assess(rec, cands, cpus=2, repeats=3))
    assert text.index("| top 1") < text.index("| top 2") < text.index("| default")
    assert ORDER in text


def test_piped_output_is_wide(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setattr(sys.stdout, "isatty", lambda: False, raising=False)
    monkeypatch.delenv("COLUMNS", raising=False)
    assert wide_console().width == WIDE
    monkeypatch.setenv("COLUMNS", "200")
    assert wide_console().width == 200


def test_the_ui_hint_opens_the_runs() -> None:
    (line,) = ui_hint("https://mlflow.example:5000/", "3", "abc", None)
    assert line == "MLflow: https://mlflow.example:5000/#/experiments/3/runs/abc"
    command, url = ui_hint("sqlite:////o/mlflow.db", "1", "abc", Path("/o/mlartifacts"))
    assert (
        " ui --backend-store-uri sqlite:////o/mlflow.db --artifacts-destination /o/mlartifacts"
        in command
    )
    assert command.endswith("--host 127.0.0.1 --port 5000 --workers 1")
    assert url.strip() == "then open http://127.0.0.1:5000/#/experiments/1/runs"


def test_the_last_lines_name_the_recommendation_or_say_there_is_none() -> None:
    results = {"best_value": 1.5, "best_trial_number": 4, "best_params": {"loader.num_workers": 2}}
    (line,) = outcome_lines({**results, "recommended": None})
    assert "not a recommendation" in line and "trial 4" in line
    recommended = {
        "trial_number": 7,
        "params": {"loader.num_workers": 3},
        "time_per_sample_ms": 1.25,
        "samples_per_s": 800.0,
        "repeats": 3,
        "confidence": "high",
        "written_to": ["a/best_loader.yaml", "conf/loader/best.yaml"],
    }
    head, where = outcome_lines({**results, "recommended": recommended})
    assert "loader.num_workers=3 (trial 7): 1.2500 ms/sample, 800 samples/s" in head
    assert "confidence high" in head
    assert where.startswith("written to: a/best_loader.yaml and conf/loader/best.yaml")
    ranked = {**recommended, "loader": {"num_workers": 3, "nproc_per_node": 2}}
    head, per_rank, where = outcome_lines({**results, "recommended": ranked})
    assert per_rank == (
        "Per rank: num_workers=3 in each of 2 ranks (trial.nproc_per_node=2), "
        "6 worker processes on the node."
    )


def _trial(number: int, workers: int, value: float | None, **attrs: object) -> FrozenTrial:
    t = create_trial(
        params={"loader.num_workers": workers},
        distributions={"loader.num_workers": IntDistribution(0, 8)},
        value=value,
        state=TrialState.COMPLETE if value is not None else TrialState.FAIL,
        user_attrs=dict(attrs),
    )
    t.number = number
    return t


def test_final_table_has_one_row_per_measurement_fastest_first() -> None:
    trials = [
        _trial(0, 0, 2.0),
        _trial(1, 2, 1.0),
        _trial(2, 0, 2.0, repeat_of=0),
        _trial(3, 4, None, reason="worker_crash"),
        _trial(4, 0, 2.0, repeat_of=0),
        _trial(5, 2, 1.0, repeat_of=1),
    ]
    rows = table_rows(trials)
    assert [r[0] for r in rows] == ["1", "0", "3"]
    notes = {r[0]: r[4] for r in rows}
    assert notes == {"1": "also asked as #5", "0": "also asked as #2, #4", "3": "worker_crash"}
    assert rows[0][2:4] == ("loader.num_workers=2", "1.0000")


def test_a_note_stays_one_line_on_a_narrow_console() -> None:
    from rich.console import Console

    from hydra_plugins.loadertune_sweeper.record._console import SweepView

    view = SweepView.__new__(SweepView)
    view.console = Console(width=40, record=True, force_terminal=False)
    view._asked_again = Counter()
    text = "the last sweep of this study stopped during its verdict: finishing the verdict now"
    view.note(text)
    assert view.console.export_text().splitlines() == [text]


def test_a_setting_is_one_spelling_in_every_mlflow_param() -> None:
    """A trial, an AutoLoader run, a recommendation and a training run all log through
    ``param_text``: a filter written as a Hydra override finds each."""
    assert [param_text(v) for v in (None, True, False, 4, 0.5, "fork")] == [
        "null",
        "true",
        "false",
        "4",
        "0.5",
        "fork",
    ]


def test_the_first_line_counts_the_earlier_trials_the_budget_counts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A continued study's repeats (answered from the cache) are not earlier trials: with
    ``max_trials_total=5`` and four measured, "running 1 now" follows "4 earlier trials"."""
    from types import SimpleNamespace

    import optuna

    from hydra_plugins.loadertune_sweeper.record._console import SweepView

    study = optuna.create_study()
    for trial in [_trial(0, 0, 2.0), _trial(1, 2, 1.0), _trial(2, 0, 2.0, repeat_of=0)]:
        study.add_trial(trial)
    study.add_trial(_trial(3, 4, 1.1))
    study.add_trial(_trial(4, 2, 1.0, repeat_of=1))
    study.add_trial(_trial(5, 8, 1.2))
    plan = SimpleNamespace(storage="memory", sweep_dir="sweep", noop=[], shard_cap=None)
    SweepView(study, 1, plan, [])  # type: ignore[arg-type]
    assert "4 earlier trials; running 1 now" in capsys.readouterr().out


def test_repeats_answered_are_one_line_before_the_next_trial() -> None:
    """A sampler that asks again for measured settings does not get a line per ask: the
    asks since the last line are counted in one line before the next trial or note."""
    from types import SimpleNamespace

    import optuna
    from rich.console import Console

    from hydra_plugins.loadertune_sweeper.record._console import SweepView

    study = optuna.create_study()
    plan = SimpleNamespace(storage="memory", sweep_dir="sweep", noop=[], shard_cap=None)
    view = SweepView(study, 12, plan, [])  # type: ignore[arg-type]
    view.console = Console(width=200, record=True, force_terminal=False)
    pruned = create_trial(
        params={"loader.num_workers": 1},
        distributions={"loader.num_workers": IntDistribution(0, 8)},
        state=TrialState.PRUNED,
        value=2.5,
        intermediate_values={5: 2.4, 15: 2.5},
        user_attrs={"reason": "pruned"},
    )
    pruned.number = 3
    view.trial(4, pruned, None)
    view.trial(5, _trial(4, 0, 2.0, repeat_of=0), None)
    view.trial(5, _trial(5, 1, 2.5, repeat_of=3), None)
    view.trial(5, _trial(6, 0, 2.0, repeat_of=0), None)
    view.steered(0)
    view.trial(5, _trial(7, 2, 1.5), None)
    view.trial(6, _trial(8, 2, 1.5, repeat_of=7), None)
    view.note("a note")
    lines = view.console.export_text().splitlines()
    assert len(lines) == 5
    assert "PRUNED after 15 steps at 2.5000 ms/sample" in lines[0]
    assert "pruned" not in lines[0].replace("PRUNED", "")  # the state says it once
    assert lines[1].endswith(
        "not run: trial 0's (2 times), trial 3's; the sampler keeps asking for trial 0's "
        "setting: measuring the nearest setting not yet measured instead"
    )
    assert lines[2].startswith("[5/12] trial 7  num_workers=2  ->  1.5000 ms/sample")
    assert lines[3].endswith("not run: trial 7's") and lines[4] == "a note"
