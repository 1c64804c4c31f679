"""The review surface read through a real ``mlflow server``: what a person opening the UI gets.

A tiny finished sweep (shared with ``test_review_surface``), then ``mlflow server`` on a free
loopback port with one worker, on that sweep's SQLite store and artifact folder; every check
goes through its REST API, as the UI's own requests do.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._mlflow_server import mlflow_server
from tests._review_sweep import ReviewedSweep, reviewed_sweep

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> ReviewedSweep:
    return reviewed_sweep(tmp_path_factory.getbasetemp() / "review")


@pytest.fixture(scope="module")
def server(swept: ReviewedSweep, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``mlflow server`` on the sweep's store, as the sweep's closing lines say to start it."""
    root = tmp_path_factory.mktemp("ui")
    with mlflow_server(swept.store, swept.out / "mlartifacts", root) as uri:
        yield uri


def _get(uri: str, path: str, **query: str) -> Any:
    url = f"{uri}/api/2.0/mlflow/{path}?{urllib.parse.urlencode(query)}"
    with urllib.request.urlopen(url, timeout=30) as answer:
        return json.load(answer)


def _post(uri: str, path: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        f"{uri}/api/2.0/mlflow/{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


def _tags(run: dict[str, Any]) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run["data"].get("tags", [])}


def _metrics(run: dict[str, Any]) -> dict[str, float]:
    return {m["key"]: m["value"] for m in run["data"].get("metrics", [])}


def _params(run: dict[str, Any]) -> dict[str, str]:
    return {p["key"]: p["value"] for p in run["data"].get("params", [])}


def test_the_sweep_reads_back_through_the_server(swept: ReviewedSweep, server: str) -> None:
    experiment = _get(server, "experiments/get-by-name", experiment_name="loadertune")
    experiment_id = experiment["experiment"]["experiment_id"]
    found = _post(server, "runs/search", {"experiment_ids": [experiment_id], "max_results": 500})
    runs = found["runs"]
    (parent,) = [r for r in runs if _tags(r).get("loadertune.kind") == "sweep"]
    parent_id = parent["info"]["run_id"]
    children = [r for r in runs if _tags(r).get("mlflow.parentRunId") == parent_id]
    measured = [t for t in swept.study.trials if "repeat_of" not in t.user_attrs]
    assert sorted(int(_tags(c)["optuna.trial_number"]) for c in children) == [
        t.number for t in measured
    ]  # one child run per measured trial; a repeat is counted on the parent
    repeats = len(swept.study.trials) - len(measured)
    assert _metrics(parent).get("repeats_answered", 0) == repeats

    (chosen,) = [c for c in children if _tags(c).get("recommended") == "true"]
    rec = swept.results["recommended"]
    assert _tags(chosen)["optuna.trial_number"] == str(rec["trial_number"])
    assert {"verdict_time_per_sample_ms", "verdict_rank"} <= _metrics(chosen).keys()
    params = _params(parent)
    assert params["recommended.loader.num_workers"] == _params(chosen)["loader.num_workers"]
    assert _metrics(parent)["recommended_trial_number"] == rec["trial_number"]

    listed = _get(server, "artifacts/list", run_id=parent_id)
    names = {f["path"] for f in listed.get("files", [])}
    assert {"verdict.png", "best_loader.yaml", "optimization_results.yaml"} <= names
    listed = _get(server, "artifacts/list", run_id=chosen["info"]["run_id"])
    assert "config.yaml" in {f["path"] for f in listed.get("files", [])}

    # A run lasts as long as its trial: at least the window the trial measured.
    for child in children:
        if "repeat_of" in _tags(child) or "window_s" not in _metrics(child):
            continue
        info = child["info"]
        duration_ms = int(info["end_time"]) - int(info["start_time"])
        assert duration_ms >= _metrics(child)["window_s"] * 1000 - 1, info


def test_the_printed_url_is_a_route_of_this_ui(swept: ReviewedSweep, server: str) -> None:
    """The sweep prints ``#/experiments/<id>/runs``: the runs table in this MLflow's UI."""
    with urllib.request.urlopen(f"{server}/", timeout=30) as answer:
        assert answer.status == 200
        assert "<html" in answer.read().decode(errors="replace").lower()
    import mlflow

    bundle = Path(mlflow.__file__).parent / "server" / "js" / "build" / "static" / "js"
    routes = "".join(p.read_text(errors="replace") for p in bundle.glob("main.*.js"))
    assert '"/experiments/:experimentId/runs"' in routes
    assert "then open http://127.0.0.1:5000/#/experiments/" in swept.proc.stdout
