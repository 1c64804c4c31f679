"""A setting that fails a verdict round (a crash, a timeout, the memory budget) is never
recommended: it leaves the race, the pick goes to the next setting, and the verdict's text,
its confidence and the MLflow tags name it. On synthetic trial results through the verdict's
own round (``VerdictRun._round``), whose ``measure`` answers a failure as the engine's
``Measurer.again`` does: a sentence instead of a result."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from mlflow import MlflowClient
from optuna.distributions import IntDistribution
from optuna.trial import create_trial

from hydra_plugins.loadertune_sweeper._keys import TrialAttr, TrialFigures
from hydra_plugins.loadertune_sweeper.record._verdict_record import log_verdict
from hydra_plugins.loadertune_sweeper.trial._measure import failure_of
from hydra_plugins.loadertune_sweeper.trial._trial_process import TrialOutcome
from hydra_plugins.loadertune_sweeper.verdict import _candidates, _text
from hydra_plugins.loadertune_sweeper.verdict._confidence import assess
from hydra_plugins.loadertune_sweeper.verdict._race import run_rounds
from hydra_plugins.loadertune_sweeper.verdict._rounds import Verdict, VerdictRun
from loadertune.config._typed import TrialConfig
from loadertune.decision import Confidence
from loadertune.record import Reason
from loadertune.record._result import TrialResult
from tests.decision.test_guess import default_trial

TIMEOUT = "timeout: no step for 60 s"
Fails = Callable[[int, int], bool]  # (workers, round) -> the measurement fails


def _cand(workers: int, searched_ms: float) -> _candidates.Candidate:
    trial = create_trial(
        params={"loader.num_workers": workers},
        distributions={"loader.num_workers": IntDistribution(0, 8)},
        value=searched_ms,
        user_attrs={TrialAttr.OVERRIDES: [f"loader.num_workers={workers}"]},
    )
    trial.number = workers
    return _candidates.Candidate(trial, [], rank={8: 1, 4: 2, 2: 3}[workers])


TIMES = {2: 1.4, 4: 1.2, 8: 1.0}  # ms per sample: 8 workers is the fastest, none far behind


def _measure(fails: Fails, log: list[str]) -> Callable[[list[str], int], TrialResult | str]:
    """A trial run: ``TIMES``' time per sample (a batch of 4 in 4 steps), or a failure."""

    def measure(overrides: list[str], job_num: int) -> TrialResult | str:
        workers = int(overrides[0].partition("=")[2])
        round_ = int(re.search(r"verdict/(\d+)-", overrides[-1]).group(1))  # type: ignore[union-attr]
        log.append(f"{round_}-{workers}")
        if fails(workers, round_):
            return TIMEOUT
        return default_trial(load_ms=0.0, step_ms=4 * TIMES[workers], num_workers=workers)

    return measure


def _verdict(fails: Fails, stopped: Callable[[], bool] = lambda: False) -> Any:
    log: list[str] = []
    notes: list[str] = []
    run = VerdictRun(
        study=None,  # type: ignore[arg-type]  # _round needs no study, and only the window
        plan=SimpleNamespace(base=SimpleNamespace(trial=TrialConfig())),  # type: ignore[arg-type]
        measure=_measure(fails, log),
        config_of=lambda _: None,  # type: ignore[arg-type, return-value]
        stopped=stopped,
        note=notes.append,
        memory_budget_mb=8192.0,
    )
    cands = [_cand(w, TIMES[w]) for w in (2, 4, 8)]
    rounds = run_rounds(cands, 3, run._round, notes.append, cpus=2)
    return cands, rounds, notes, log


def test_the_fastest_setting_failing_one_round_is_named_and_not_recommended() -> None:
    cands, rounds, notes, log = _verdict(lambda w, r: w == 8 and r == 1)
    fast = cands[2]
    assert rounds is not None and fast.failed == [(1, TIMEOUT)]
    assert fast.left_after == 2 and fast.left_why == f"failed in round 1 ({TIMEOUT})"
    assert not [entry for entry in log if entry.startswith(("2-8", "3-8"))]  # never again
    assert any("trial 8 failed in round 1: timeout" in n for n in notes)
    rec = _candidates.recommend(cands)
    assert rec.chosen is cands[1] and rec.chosen.workers == 4  # the next fastest
    assurance = assess(rec, cands, 2, 3)
    assert assurance.level != Confidence.HIGH
    assert "8 (num_workers=8), -16.7% against the pick over the 1 round it ran" in assurance.why
    text = _text.verdict_markdown(rec, cands, assurance)
    assert "**Recommended: num_workers=4**" in text
    assert f"Not recommended: trial 8 (top 1, num_workers=8) failed in round 1 ({TIMEOUT})." in (
        text
    )


def test_without_the_failure_the_same_rounds_recommend_the_fastest() -> None:
    cands, _, _, _ = _verdict(lambda w, r: False)
    rec = _candidates.recommend(cands)
    assert rec.chosen.workers == 8 and not _text.failed_sentences(cands)
    assert "Not recommended" not in _text.verdict_markdown(rec, cands, assess(rec, cands, 2, 3))


def test_a_slow_setting_failing_costs_the_pick_nothing() -> None:
    cands, _, _, _ = _verdict(lambda w, r: w == 2 and r == 0)
    rec = _candidates.recommend(cands)
    assert rec.chosen.workers == 8 and cands[0].failed and not cands[0].values
    assert "trial 2" not in assess(rec, cands, 2, 3).why  # 100% slower in the search
    assert "trial 2 (top 3, num_workers=2) failed in round 0" in _text.failed_sentences(cands)[0]


def test_every_setting_failing_leaves_nothing_to_recommend() -> None:
    cands, rounds, notes, _ = _verdict(lambda w, r: r == 1)
    assert rounds == 2 and not _candidates.in_race(cands)
    assert "every one failed a round" in notes[-1]
    assert len(_text.failed_sentences(cands)) == 3


def test_an_interrupted_measurement_stops_the_rounds_and_is_no_failure() -> None:
    stop = [False]

    def fails(workers: int, round_: int) -> bool:
        stop[0] = round_ == 1  # Ctrl-C during round 1: the trial answers "interrupted"
        return stop[0]

    cands, rounds, _, _ = _verdict(fails, stopped=lambda: stop[0])
    assert rounds is None and not any(c.failed for c in cands)


def test_a_failed_trial_process_says_why_in_one_line() -> None:
    outcome = TrialOutcome(reason=Reason.TIMEOUT, error="Traceback ...\n  ...\nno step for 60 s\n")
    assert failure_of(outcome) == "timeout: no step for 60 s"
    assert failure_of(TrialOutcome(reason=Reason.MEMORY_BUDGET)) == "memory_budget"


@dataclass
class _Runs:
    """The verdict's view of a sweep's MLflow record (``record._verdict_record.SweepRuns``),
    on a real SQLite tracking store: a parent run and one child run a candidate."""

    client: Any
    parent_id: str
    children: dict[int, str]
    enabled: bool = True

    def run_of(self, number: int) -> str | None:
        return self.children.get(number)


def test_mlflow_names_the_setting_that_failed(tmp_path: Path) -> None:
    cands, _, _, _ = _verdict(lambda w, r: w == 8 and r == 1)
    rec = _candidates.recommend(cands)
    assurance = assess(rec, cands, 2, 3)
    text = _text.verdict_markdown(rec, cands, assurance)
    for name in ("verdict.md", "best_loader.yaml", "verdict.png"):
        (tmp_path / name).write_text(text)
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("failed-round", artifact_location=tmp_path.as_uri())
    parent = client.create_run(experiment).info.run_id
    children = {c.trial.number: client.create_run(experiment).info.run_id for c in cands}
    verdict = Verdict(rec, cands, assurance, text, tmp_path / "best.yaml", {"num_workers": 4}, 3)
    log_verdict(_Runs(client, parent, children), verdict, tmp_path)
    tags = client.get_run(parent).data.tags
    assert tags["verdict.num_workers"] == "4"
    assert tags["verdict.failed"].startswith("trial 8 (top 1, num_workers=8) failed in round 1")
    failed = client.get_run(children[8]).data
    assert failed.tags["verdict.failed"] == f"failed in round 1 ({TIMEOUT})"
    assert failed.metrics["verdict_failed_rounds"] == 1.0
    assert "recommended" not in failed.tags
    assert "verdict.failed" not in client.get_run(children[4]).data.tags
    assert client.get_run(children[4]).data.tags["recommended"] == "true"


def test_a_setting_that_stalled_in_the_search_gets_rounds_long_enough_for_its_stalls() -> None:
    run = VerdictRun(
        study=None,  # type: ignore[arg-type]
        plan=SimpleNamespace(base=SimpleNamespace(trial=TrialConfig())),  # type: ignore[arg-type]
        measure=lambda o, n: TIMEOUT,
        config_of=lambda _: None,  # type: ignore[arg-type, return-value]
        stopped=lambda: False,
        note=lambda _: None,
        memory_budget_mb=8192.0,
    )
    stalled, steady, unmeasured = _cand(2, 2.0), _cand(8, 1.0), _cand(4, 1.5)
    for c, per_1000 in ((stalled, 25.0), (steady, 0.0)):
        kept = TrialFigures(3.0, 0, 0, 0, 40, 200.0, long_waits_per_1000_steps=per_1000)
        for k, v in kept.as_attrs().items():
            c.trial.set_user_attr(k, v)
    # 10 stalls at 25 per 1000 steps would take 400 steps: trial.max_steps' 3 x 40 = 120.
    assert run.round_window(stalled) == ["trial.precision=null", "trial.steps=120"]
    assert run.round_window(steady) == ["trial.precision=null"]
    assert run.round_window(unmeasured) == ["trial.precision=null"]
