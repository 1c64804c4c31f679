"""The record of a tuning session: the MLflow run and the exported ``best_loader.yaml``.

The run is written through ``MlflowClient`` only, so the user's own active run stays active:
with a run open, the session is a child of it (``mlflow.parentRunId``); otherwise, when a
tracking URI is set, a run of its own in ``MLFLOW_EXPERIMENT_NAME`` (default ``loadertune``).
The tags are the sweep verdict's (``verdict.bottleneck``, ``verdict.confidence`` ...).

Neither record may stop the training it tunes: an ``export`` path that cannot be written is
refused when the AutoLoader is built (:func:`check_export`), a tracking server that does not
answer then is warned of and not used (:func:`tracking_wanted`, the command line's 5 s check),
and a failure at settling only warns, naming the user's line (:func:`warn_user`); MLflow's
writes retry for seconds, not its default minutes (``bounded_tracking_retries``).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadertune._lazy import mlflow, mlflow_entities
from loadertune.autoloader._decision import Decision, probe_rows
from loadertune.errors import ConfigError
from loadertune.loader import loader_yaml
from loadertune.machine import machine_info
from loadertune.record import (
    StoreUnavailable,
    check_tracking_server,
    check_writable,
    param_text,
    write_text_atomically,
)

if TYPE_CHECKING:
    from loadertune.autoloader._schedule import Tuner


def mlflow_active() -> bool:
    """True when the user's script has a run open or a tracking URI is set.

    A script with a run open has imported mlflow; without that or the environment variable,
    mlflow is not imported just to ask (it takes seconds, inside the training loop).
    """
    if "mlflow" not in sys.modules:
        return bool(os.environ.get("MLFLOW_TRACKING_URI"))

    if mlflow.active_run() is not None or os.environ.get("MLFLOW_TRACKING_URI"):
        return True
    return bool(mlflow.is_tracking_uri_set())  # type: ignore[no-untyped-call]


def warn_user(message: str) -> None:
    """Warn, pointing at the first frame outside loadertune: the user's line (their ``for``
    loop, their ``AutoLoader(...)`` call), wherever inside loadertune the warning rose."""
    level, frame = 2, sys._getframe(1)
    while frame is not None and str(frame.f_globals.get("__name__", "")).startswith("loadertune"):
        level, frame = level + 1, frame.f_back  # type: ignore[assignment]
    warnings.warn(message, RuntimeWarning, stacklevel=level)


def check_export(path: str | Path) -> Path:
    """The export path, refused now if training could not write it at settling.

    Raises:
        ConfigError: ``path`` is a folder, or its folder cannot be made or written.
    """
    out = Path(path).expanduser()
    if out.is_dir():
        raise ConfigError(
            "export", out, "is a folder; AutoLoader writes one file",
            f"name a file in it, e.g. export='{out / 'best_loader.yaml'}'",
        )  # fmt: skip
    try:
        check_writable(out.parent, key="export")
    except StoreUnavailable as err:
        raise ConfigError(
            "export", out, f"its folder cannot be written ({err})",
            "pass a path in a folder you can write, or export=None",
        ) from None  # fmt: skip
    return out


def tracking_wanted(track: bool | None) -> bool | None:
    """``track`` as asked, or False (with a warning) when recording is on and the tracking
    server does not answer within the command line's check: no minutes of MLflow retries at
    settling. None stays None: whether to record is decided at settling, as documented."""
    if track is False or (track is None and not mlflow_active()):
        return track
    uri = os.environ.get("MLFLOW_TRACKING_URI", "")
    if not uri and "mlflow" in sys.modules:
        uri = mlflow.get_tracking_uri()
    try:
        check_tracking_server(uri)
    except (StoreUnavailable, ConfigError) as err:
        warn_user(f"AutoLoader will not record to MLflow: {err}")
        return False
    return track


def header(decision: Decision, ranks: int = 1) -> list[str]:
    """Comment lines: what chose it, how sure, how to use it (and, with ranks, for how many)."""

    host = machine_info()
    lines = [
        f"Chosen by loadertune.AutoLoader during training: {decision.chosen.name}; confidence "
        f"{decision.assurance.level}; bottleneck {decision.bottleneck or 'unknown'}",
        f"on {host['host']} ({host['usable_cpus']} usable CPUs, {host['cpu_model']}, "
        f"gpu {host['gpu']}, torch {host['torch']}).",
    ]
    if ranks > 1:
        lines.append(
            f"Tuned with {ranks} ranks under torch.distributed: the settings are per rank "
            f"({decision.chosen.num_workers * ranks} worker processes in all)."
        )
    lines.append(
        "Use: loadertune loader=best  |  in training code: "
        "loadertune.build_dataloader(dataset, OmegaConf.load(this_file))"
    )
    return lines


def export(
    path: str | Path, settings: dict[str, Any], decision: Decision, ranks: int = 1
) -> Path | None:
    """Write ``best_loader.yaml`` (the settings ``build_dataloader`` takes) to ``path``; a
    write that fails now (a full disk, a folder gone) warns and returns None."""
    out = Path(path).expanduser()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(out, loader_yaml(settings, header(decision, ranks)))
    except OSError as err:
        warn_user(f"AutoLoader could not export {out}: {err}; training goes on")
        return None
    return out


def record(
    settings: dict[str, Any], decision: Decision, tuner: Tuner, report: str, ranks: int = 1
) -> str:
    """Write the session as an MLflow run; returns its id. With ``ranks`` > 1 the figures are
    the node's (each segment the slowest rank's) and ``autotune.world_size`` says so."""
    client = mlflow.MlflowClient()
    parent = mlflow.active_run()
    tags = {"loadertune.autotune": "true", "mlflow.runName": "autoloader"}
    if parent is not None:
        experiment_id = parent.info.experiment_id
        tags["mlflow.parentRunId"] = parent.info.run_id
    else:
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "loadertune")
        found = client.get_experiment_by_name(name)
        experiment_id = found.experiment_id if found else client.create_experiment(name)
    run = client.create_run(experiment_id, tags=tags)
    run_id: str = run.info.run_id
    now = int(time.time() * 1000)
    params = [mlflow_entities.Param(f"loader.{k}", param_text(v)) for k, v in settings.items()]
    params += [
        mlflow_entities.Param(
            "autotune.candidates", ",".join(str(r["setting"]) for r in probe_rows(tuner))
        )
    ]
    if ranks > 1:
        params.append(mlflow_entities.Param("autotune.world_size", str(ranks)))
    client.log_batch(
        run_id,
        metrics=_metrics(tuner, now),
        params=params,
        tags=[mlflow_entities.RunTag(k, v) for k, v in _verdict_tags(decision).items()],
    )
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "best_loader.yaml").write_text(loader_yaml(settings, header(decision, ranks)))
        (Path(tmp) / "autotune_report.txt").write_text(report + "\n")
        (Path(tmp) / "probes.json").write_text(json.dumps(tuner.state()["measures"], indent=1))
        client.log_artifacts(run_id, tmp)
    client.set_terminated(run_id)
    return run_id


def _verdict_tags(d: Decision) -> dict[str, str]:
    """The tags a sweep's verdict carries, for the same MLflow views and searches."""
    tags = {
        "verdict.num_workers": str(d.chosen.num_workers),
        "verdict.setting": d.chosen.name,
        "verdict.bottleneck": d.bottleneck,
        "verdict.why": d.why,
        "verdict.confidence": d.assurance.level,
        "verdict.confidence_why": d.assurance.why,
        "bottleneck": d.bottleneck,
        "bottleneck.why": d.why,
    }
    return {k: v[:5000] for k, v in tags.items()}


def _metrics(tuner: Tuner, now: int) -> list[Any]:
    """Per probe setting: median time per batch, wait share, start-up, peak memory; and per
    segment (step = its order) the time per batch of each setting."""
    out = []
    for r in probe_rows(tuner):
        name = r["setting"]
        for key in ("ms_per_batch", "wait_share", "startup_s", "peak_rss_mb", "steps"):
            out.append(mlflow_entities.Metric(f"probe.{name}.{key}", float(r[key]), now, 0))  # type: ignore[arg-type]
    for i, m in enumerate(tuner.measures):
        if m.steps and not m.failed:
            out.append(
                mlflow_entities.Metric(
                    f"segment.{m.setting.name}.ms_per_batch", m.per_batch_s * 1000, now, i
                )
            )
    return out
