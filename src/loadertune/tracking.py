"""Record a trial in MLflow: params, summary metrics, per-step series, machine tags, config.

Only called from the process that owns the record (the entry point or the sweep), after the
trial has finished, so a trial that never started leaves nothing half-written.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadertune.config import RunConfig, TrackingConfig, resolve_path

if TYPE_CHECKING:
    from mlflow.entities import Metric

    from loadertune.result import TrialResult

_BATCH = 1000  # MLflow accepts at most 1000 metrics per log_batch call


def tracking_uri(tracking: TrackingConfig, output_root: str) -> str:
    """``tracking.tracking_uri``, else ``MLFLOW_TRACKING_URI``, else SQLite under outputs/."""
    if tracking.tracking_uri:
        return tracking.tracking_uri
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    db = resolve_path(output_root) / "mlflow.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{db}"


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


def trial_params(config: RunConfig) -> dict[str, str]:
    """The flattened config as MLflow params (``loader.num_workers`` ...)."""
    from dataclasses import asdict

    sections = {
        k: asdict(getattr(config, k)) for k in ("dataset", "storage", "model", "loader", "trial")
    }
    return {k: "null" if v is None else str(v) for k, v in flatten(sections).items()}


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


def series(result: TrialResult, timestamp_ms: int) -> list[Metric]:
    """Per-step and per-sample series as MLflow metrics with their step index.

    ``cpu_percent`` and ``memory_mb`` share the index of the process-tree sample they come
    from, so the two stay aligned in time though memory is read less often.
    """
    from mlflow.entities import Metric

    out: list[Metric] = []
    for r in result.steps:
        for key, value in (
            ("step_time_ms", r.step_s),
            ("data_wait_ms", r.wait_s),
            ("copy_ms", r.copy_s),
            ("compute_ms", r.compute_s),
        ):
            out.append(Metric(key, value * 1000.0, timestamp_ms, r.index))
    for i, s in enumerate(result.resources):  # memory is read in some samples only
        out.append(Metric("cpu_percent", s.cpu_percent, timestamp_ms, i))
        if s.memory_bytes is not None:
            out.append(Metric("memory_mb", s.memory_bytes / 2**20, timestamp_ms, i))
    return out


@contextmanager
def mlflow_run(
    tracking: TrackingConfig, output_root: str, run_name: str | None = None, **kwargs: Any
) -> Iterator[Any]:
    """Start an MLflow run in the configured store and experiment; FAILED if the body raises."""
    import logging

    import mlflow

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    mlflow.set_tracking_uri(tracking_uri(tracking, output_root))
    mlflow.set_experiment(tracking.experiment)
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
    (:mod:`loadertune.diagnosis`), with its evidence in ``diagnosis.json``.
    """
    import time

    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag

    client = MlflowClient()
    now = int(time.time() * 1000)
    params = [Param(k, v[:6000]) for k, v in trial_params(config).items()]
    from loadertune.diagnosis import diagnose_result

    diagnosis = diagnose_result(result, memory_budget_mb)
    tags = [RunTag(k, v) for k, v in trial_tags(result).items()]
    tags += [RunTag("bottleneck", diagnosis.label), RunTag("bottleneck.why", diagnosis.sentence)]
    metrics = [Metric(k, v, now, 0) for k, v in result.metrics().items()]
    client.log_batch(run_id, metrics=metrics, params=params, tags=tags)
    points = series(result, now)
    for i in range(0, len(points), _BATCH):
        client.log_batch(run_id, metrics=points[i : i + _BATCH])
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.yaml").write_text(resolved_config_yaml)
        (Path(tmp) / "trial_result.json").write_text(json.dumps(result.to_dict(), indent=1))
        (Path(tmp) / "diagnosis.json").write_text(json.dumps(diagnosis.evidence, indent=1))
        client.log_artifacts(run_id, tmp)
