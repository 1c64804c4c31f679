"""What a person reviews after a sweep tells one story: the verdict's recommendation is the
headline in MLflow, in the results file and in the terminal; everything stays under the
output root; child runs span their trials; repeats carry figures; series are named as such."""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from loadertune.record._tracking import param_text
from tests._review_sweep import ReviewedSweep, reviewed_sweep

pytestmark = pytest.mark.slow

SERIES = ("step_time_ms", "data_wait_ms", "copy_ms", "compute_ms", "cpu_percent", "memory_mb")


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> ReviewedSweep:
    return reviewed_sweep(tmp_path_factory.getbasetemp() / "review")


@pytest.fixture(scope="module")
def runs(swept: ReviewedSweep) -> tuple[Any, list[Any], Any]:
    """(the parent run, the child runs, the client) of the sweep's store."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=swept.store)
    experiment = client.get_experiment_by_name("loadertune")
    assert experiment is not None
    found = client.search_runs([experiment.experiment_id], max_results=1000)
    (parent,) = [r for r in found if r.data.tags.get("loadertune.kind") == "sweep"]
    children = [r for r in found if r.data.tags.get("loadertune.kind") == "trial"]
    return parent, children, client


def test_nothing_lands_in_the_working_directory(swept: ReviewedSweep, runs: Any) -> None:
    assert sorted(p.name for p in swept.cwd.iterdir()) == []
    parent, children, client = runs
    experiment = client.get_experiment(parent.info.experiment_id)
    assert experiment.artifact_location == str(swept.out / "mlartifacts")
    for run in [parent, *children]:
        assert run.info.artifact_uri.startswith(str(swept.out / "mlartifacts")), run.info
    assert (swept.out / "mlartifacts" / parent.info.run_id / "artifacts" / "verdict.png").exists()


def test_the_recommendation_is_the_headline(swept: ReviewedSweep, runs: Any) -> None:
    parent, children, client = runs
    rec = swept.results["recommended"]
    assert rec["confidence"] in {"high", "medium", "low"}
    assert rec["repeats"] >= 1 and rec["time_per_sample_ms"] > 0
    for path in rec["written_to"]:
        assert str(path).startswith(str(swept.out))
    params, metrics = parent.data.params, parent.data.metrics
    for key, value in rec["loader"].items():
        assert params[f"recommended.loader.{key}"] == param_text(value)
    assert metrics["recommended_trial_number"] == rec["trial_number"]
    assert metrics["recommended_time_per_sample_ms"] == pytest.approx(rec["time_per_sample_ms"])
    assert metrics["recommended_samples_per_s"] == pytest.approx(rec["samples_per_s"])
    # The search's single fastest measurement is kept, under its own name.
    assert metrics["search_best_trial_number"] == swept.results["best_trial_number"]
    assert "search_best.loader.num_workers" in params
    assert not [k for k in [*params, *metrics] if k.startswith(("best.", "best_"))]
    (chosen,) = [c for c in children if c.data.tags.get("recommended") == "true"]
    assert chosen.data.tags["optuna.trial_number"] == str(rec["trial_number"])
    assert chosen.data.tags["recommended.by"] == parent.info.run_id
    assert chosen.data.params["loader.num_workers"] == params["recommended.loader.num_workers"]
    assert chosen.data.metrics["verdict_time_per_sample_ms"] == pytest.approx(
        rec["time_per_sample_ms"]
    )
    assert chosen.data.metrics["verdict_rank"] >= 1
    # Its repeats, one per round (the round as the step): the median is the verdict's figure.
    history = client.get_metric_history(chosen.info.run_id, "verdict_round_time_per_sample_ms")
    assert len(history) == rec["repeats"] and sorted(m.step for m in history) == list(
        range(rec["repeats"])
    )
    assert statistics.median(m.value for m in history) == pytest.approx(rec["time_per_sample_ms"])


def test_the_terminal_ends_with_the_recommendation(swept: ReviewedSweep, runs: Any) -> None:
    parent, _, _ = runs
    lines = swept.proc.stdout.strip().splitlines()
    rec = swept.results["recommended"]
    assert lines[-2].startswith("recommended: loader.num_workers=")
    assert f"(trial {rec['trial_number']})" in lines[-2]
    assert lines[-1].startswith("written to: ") and "best_loader.yaml" in lines[-1]
    assert not any(line.startswith("best: ") for line in lines)
    # How to open it: one command on this store, one worker, loopback; the runs table's URL.
    (ui,) = [line for line in lines if line.startswith("MLflow UI: ")]
    assert f"--backend-store-uri {swept.store}" in ui
    assert "--host 127.0.0.1" in ui and "--workers 1" in ui
    url = f"http://127.0.0.1:5000/#/experiments/{parent.info.experiment_id}/runs"
    assert any(line.strip() == f"then open {url}" for line in lines)
    assert "Rows in the search's order" in swept.proc.stdout


def test_child_runs_span_their_trials(swept: ReviewedSweep, runs: Any) -> None:
    _, children, _ = runs
    by_number = {int(c.data.tags["optuna.trial_number"]): c for c in children}
    for trial in swept.study.trials:
        if "repeat_of" in trial.user_attrs:  # answered, not measured: no child run
            assert trial.number not in by_number
            continue
        run = by_number[trial.number]
        assert trial.datetime_start is not None and trial.datetime_complete is not None
        assert run.info.start_time == int(trial.datetime_start.timestamp() * 1000)
        assert run.info.end_time == int(trial.datetime_complete.timestamp() * 1000)
        # Optuna's values, filterable in the UI, spelled as an override would spell them.
        searched = {k: v for k, v in run.data.tags.items() if k.startswith("optuna.param.")}
        assert searched == {f"optuna.param.{k}": param_text(v) for k, v in trial.params.items()}


def test_a_repeat_is_counted_not_a_row(swept: ReviewedSweep, runs: Any) -> None:
    parent, children, _ = runs
    repeats = [t for t in swept.study.trials if "repeat_of" in t.user_attrs]
    assert repeats  # the second trial, at least
    assert len(children) == len(swept.study.trials) - len(repeats)
    assert parent.data.metrics["repeats_answered"] == len(repeats)
    by_number = {int(c.data.tags["optuna.trial_number"]): c for c in children}
    for t in repeats:
        answered = by_number[int(t.user_attrs["repeat_of"])]
        assert f"#{t.number}" in answered.data.tags["also_asked_as"]


def test_series_are_named_as_series(swept: ReviewedSweep, runs: Any) -> None:
    _, children, client = runs
    for child in children:
        assert not set(SERIES) & child.data.metrics.keys(), child.data.metrics.keys()
    measured = next(
        c
        for c in children
        if c.data.tags["optuna.state"] == "COMPLETE" and "repeat_of" not in c.data.tags
    )
    steps = int(measured.data.metrics["timed_steps"])
    history = client.get_metric_history(measured.info.run_id, "series.step_time_ms")
    assert sorted(m.step for m in history) == list(range(steps))
    assert client.get_metric_history(measured.info.run_id, "series.cpu_percent")
