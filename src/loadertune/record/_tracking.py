"""Record a trial in MLflow: params, summary metrics, per-step series, machine tags, config.

Only called from the process that owns the record (the entry point or the sweep), after the
trial has finished, so a trial that never started leaves nothing half-written.

Names: a summary keeps its plain name (``step_time_ms_p50``, ``cpu_percent_mean``); a series,
one point per step or per sample, is named ``series.<what>`` (``series.step_time_ms``), so no
table column shows a series' last point under a summary's name. With the default store
(SQLite under ``paths.output_root``) artifacts go to ``<output_root>/mlartifacts``: nothing is
written to the working directory.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadertune._lazy import mlflow, mlflow_entities, mlflow_exceptions
from loadertune.config import RunConfig, TrackingConfig, resolve_path
from loadertune.measure import diagnose_result
from loadertune.record._mlflow_store import open_store

if TYPE_CHECKING:
    from mlflow.entities import Metric

    from loadertune.measure import StepRecord
    from loadertune.record._result import TrialResult

_BATCH = 1000  # MLflow accepts at most 1000 metrics per log_batch call


SERIES = "series."  # the prefix of every per-step or per-sample metric
ARTIFACTS_DIR = "mlartifacts"  # under paths.output_root, with the default store
# The experiment's kind, as MLflow's UI reads it: classic runs, not GenAI traces.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}


def tracking_uri(tracking: TrackingConfig, output_root: str) -> str:
    """``tracking.tracking_uri``, else ``MLFLOW_TRACKING_URI``, else SQLite under outputs/."""
    if tracking.tracking_uri:
        return tracking.tracking_uri
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    return default_store(output_root)


def default_store(output_root: str) -> str:
    """The default store: ``sqlite:///<output_root>/mlflow.db`` (the folder is created)."""
    db = resolve_path(output_root) / "mlflow.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{db}"


def artifact_root(tracking: TrackingConfig, output_root: str) -> Path | None:
    """Where a new experiment keeps its artifacts: ``<output_root>/mlartifacts`` (absolute)
    with the default store; None (MLflow's or the server's choice) with any other.

    Compared by value: ``mlflow.set_tracking_uri`` itself exports ``MLFLOW_TRACKING_URI``.
    """
    if tracking_uri(tracking, output_root) != default_store(output_root):
        return None
    return resolve_path(output_root) / ARTIFACTS_DIR


def use_experiment(tracking: TrackingConfig, output_root: str, name: str | None = None) -> str:
    """Point MLflow at the configured store and experiment, creating it if new; its id.

    A new experiment in the default store gets ``<output_root>/mlartifacts`` as its artifact
    location, resolved now, so artifacts land beside the database whatever the working
    directory (MLflow's own default is ``./mlruns`` under it).
    """
    # MLflow prints two "View run/experiment at" lines for every run it ends on a tracking
    # server: a sweep's console would be mostly those. The summary names the UI once.
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    uri = tracking_uri(tracking, output_root)
    open_store(uri)  # a fresh SQLite store's tables made once, whoever opens it meanwhile
    mlflow.set_tracking_uri(uri)
    client = mlflow.MlflowClient(uri)
    name = name or tracking.experiment
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        root = artifact_root(tracking, output_root)
        # Another process may create it meanwhile.
        with contextlib.suppress(mlflow_exceptions.MlflowException):
            client.create_experiment(
                name, artifact_location=None if root is None else str(root), tags=EXPERIMENT_KIND
            )
    return mlflow.set_experiment(name).experiment_id


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"loader": {"num_workers": 2}}`` -> ``{"loader.num_workers": 2}``."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def param_text(value: Any) -> str:
    """A value as an MLflow param, in its YAML spelling (``null``, ``true``, ``4``), the way a
    Hydra override writes it: a setting reads the same in a trial, an AutoLoader run, a
    sweep's recommendation and a tracked training run."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def trial_params(config: RunConfig) -> dict[str, str]:
    """The flattened config as MLflow params (``loader.num_workers`` ...)."""
    sections = {
        k: asdict(getattr(config, k)) for k in ("dataset", "storage", "model", "loader", "trial")
    }
    return {k: param_text(v) for k, v in flatten(sections).items()}


def trial_tags(result: TrialResult) -> dict[str, str]:
    """Machine and effective settings, as tags."""
    tags = {f"machine.{k}": str(v) for k, v in result.machine.items()}
    tags.update(
        {
            "device": result.device,
            "start_method": result.start_method,
            "effective.pin_memory": str(result.effective_loader.pin_memory),
            "effective.non_blocking": str(result.effective_loader.non_blocking),
            "memory_metric": result.memory_metric,
            "truncated": str(result.truncated),
            "epochs": str(result.epochs),
        }
    )
    if result.warnings:
        tags["warnings"] = " | ".join(result.warnings)[:5000]
    return tags


def step_series(steps: list[StepRecord], timestamp_ms: int) -> list[Metric]:
    """The per-step series of ``steps`` (a complete trial's, or those a stopped one managed):
    ``series.step_time_ms``, ``series.data_wait_ms``, ``series.copy_ms``, ``series.compute_ms``
    at each step's index."""
    return [
        mlflow_entities.Metric(SERIES + key, value * 1000.0, timestamp_ms, r.index)
        for r in steps
        for key, value in (
            ("step_time_ms", r.step_s),
            ("data_wait_ms", r.wait_s),
            ("copy_ms", r.copy_s),
            ("compute_ms", r.compute_s),
        )
    ]


def series(result: TrialResult, timestamp_ms: int) -> list[Metric]:
    """Per-step and per-sample series as MLflow metrics with their step index.

    Each is named ``series.<what>`` (``series.step_time_ms``, ``series.data_wait_ms``,
    ``series.copy_ms``, ``series.compute_ms``, ``series.cpu_percent``, ``series.memory_mb``).
    ``series.cpu_percent`` and ``series.memory_mb`` share the index of the process-tree sample
    they come from, so the two stay aligned in time though memory is read less often.
    """
    out = step_series(result.steps, timestamp_ms)
    for i, s in enumerate(result.resources):  # memory is read in some samples only
        out.append(mlflow_entities.Metric(SERIES + "cpu_percent", s.cpu_percent, timestamp_ms, i))
        if s.memory_bytes is not None:
            out.append(
                mlflow_entities.Metric(
                    SERIES + "memory_mb", s.memory_bytes / 2**20, timestamp_ms, i
                )
            )
    return out


@contextmanager
def mlflow_run(
    tracking: TrackingConfig, output_root: str, run_name: str | None = None, **kwargs: Any
) -> Iterator[Any]:
    """Start an MLflow run in the configured store and experiment; FAILED if the body raises."""
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    use_experiment(tracking, output_root)
    with mlflow.start_run(run_name=run_name or tracking.run_name, **kwargs) as run:
        yield run


def log_trial(
    run_id: str,
    config: RunConfig,
    result: TrialResult,
    resolved_config_yaml: str,
    memory_budget_mb: float | None = None,
) -> None:
    """Write a measured trial into the run ``run_id``: params, metrics, series, tags, artifacts.

    The tags include the bottleneck label and the sentence that explains it
    (:mod:`loadertune.measure._diagnosis`), with its evidence in ``diagnosis.json``.
    """
    client = mlflow.MlflowClient()
    now = int(time.time() * 1000)
    params = [mlflow_entities.Param(k, v[:6000]) for k, v in trial_params(config).items()]

    diagnosis = diagnose_result(result, memory_budget_mb)
    tags = [mlflow_entities.RunTag(k, v) for k, v in trial_tags(result).items()]
    tags += [
        mlflow_entities.RunTag("bottleneck", diagnosis.label),
        mlflow_entities.RunTag("bottleneck.why", diagnosis.sentence),
    ]
    metrics = [mlflow_entities.Metric(k, v, now, 0) for k, v in result.metrics().items()]
    client.log_batch(run_id, metrics=metrics, params=params, tags=tags)
    points = series(result, now)
    for i in range(0, len(points), _BATCH):
        client.log_batch(run_id, metrics=points[i : i + _BATCH])
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.yaml").write_text(resolved_config_yaml)
        (Path(tmp) / "trial_result.json").write_text(json.dumps(result.to_dict(), indent=1))
        (Path(tmp) / "diagnosis.json").write_text(json.dumps(diagnosis.evidence, indent=1))
        client.log_artifacts(run_id, tmp)


UI_PORT = 5000


def ui_hint(uri: str, experiment_id: str, run_id: str, artifacts: Path | None) -> list[str]:
    """Lines that say how to open a run in MLflow's UI.

    On an http(s) tracking server: the run's URL. Otherwise one command that serves this store
    on 127.0.0.1 with one worker and no background job runners (light enough to leave
    running), then the URL of the experiment's runs table (``#/experiments/<id>/runs``, the
    route of MLflow 3's UI; the bare experiment page may open on GenAI traces).
    """
    if uri.startswith(("http://", "https://")):
        return [f"MLflow: {uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"]
    command = [
        mlflow_command(),
        "ui",
        "--backend-store-uri",
        uri,
    ]
    if artifacts is not None:
        command += ["--artifacts-destination", str(artifacts)]
    command += ["--host", "127.0.0.1", "--port", str(UI_PORT), "--workers", "1"]
    return [
        "MLflow UI: MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false " + shlex.join(command),
        f"  then open http://127.0.0.1:{UI_PORT}/#/experiments/{experiment_id}/runs",
    ]


def mlflow_command() -> str:
    """``mlflow`` if that is this environment's, else the full path of this environment's."""
    own = Path(sys.executable).with_name("mlflow")
    found = shutil.which("mlflow")
    if not own.exists() or (found and Path(found).resolve() == own.resolve()):
        return "mlflow"
    return str(own)
