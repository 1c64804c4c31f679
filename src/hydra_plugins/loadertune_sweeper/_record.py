"""What a sweep leaves behind: MLflow parent and child runs, results file, plots, tables.

Only the sweep process calls this module: trial processes report over a pipe, so a trial
killed by the kernel is still recorded here, with what it measured before it died.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from omegaconf import OmegaConf
from optuna.trial import FrozenTrial, TrialState

from loadertune.config import RunConfig, TrackingConfig
from loadertune.result import TrialResult
from loadertune.timing import StepRecord, summarize

from . import _fleet

if TYPE_CHECKING:
    from ._confidence import Assurance
    from ._guess import Guess

_log = logging.getLogger(__name__)

PARENT_RUN = "mlflow_parent_run_id"
MLFLOW_STATUS = {
    TrialState.COMPLETE: "FINISHED",
    TrialState.PRUNED: "KILLED",
    TrialState.FAIL: "FAILED",
}


class SweepRecorder:
    """One MLflow parent run per sweep invocation, one child run per trial."""

    def __init__(
        self,
        tracking: TrackingConfig,
        output_root: str,
        study: optuna.Study,
        storage: str,
        sampler: str,
    ) -> None:
        import mlflow
        from mlflow import MlflowClient

        from loadertune.tracking import tracking_uri

        self.enabled = tracking.enabled
        self.parent_id: str | None = None
        if not self.enabled:
            return
        uri = tracking_uri(tracking, output_root)
        mlflow.set_tracking_uri(uri)
        self.client = MlflowClient(uri)
        experiment = mlflow.set_experiment(tracking.experiment)
        self.experiment_id = experiment.experiment_id
        run = self.client.create_run(
            self.experiment_id,
            run_name=f"sweep {study.study_name} on {socket.gethostname()}",
            tags={
                **_fleet.host_tags(),
                "loadertune.kind": "sweep",
                "optuna.study_name": study.study_name,
                "optuna.storage": storage,
                "optuna.sampler": sampler,
            },
        )
        self.parent_id = run.info.run_id

    def record_trial(
        self,
        frozen: FrozenTrial,
        config: RunConfig | None,
        result: TrialResult | None,
        steps: list[StepRecord],
        resolved_yaml: str,
        tags: dict[str, str],
    ) -> str | None:
        """Create the trial's child run with its state, reason and whatever it measured."""
        if not self.enabled:
            return None
        from mlflow.entities import Metric, Param

        from loadertune.tracking import log_trial, trial_params

        run = self.client.create_run(
            self.experiment_id,
            run_name=f"trial {frozen.number}",
            tags={
                "mlflow.parentRunId": str(self.parent_id),
                "loadertune.kind": "trial",
                "optuna.trial_number": str(frozen.number),
                "optuna.state": frozen.state.name,
                **tags,
            },
        )
        run_id: str = run.info.run_id
        if config is not None and result is not None:
            log_trial(run_id, config, result, resolved_yaml)
        else:
            now = int(time.time() * 1000)
            params = (
                []
                if config is None
                else [Param(k, v[:6000]) for k, v in trial_params(config).items()]
            )
            metrics = [Metric(k, float(v), now, 0) for k, v in partial_metrics(steps).items()]
            for r in steps:
                metrics.append(Metric("step_time_ms", r.step_s * 1000, now, r.index))
                metrics.append(Metric("data_wait_ms", r.wait_s * 1000, now, r.index))
            for i in range(0, max(len(metrics), 1), 1000):
                self.client.log_batch(
                    run_id,
                    metrics=metrics[i : i + 1000],
                    params=params if i == 0 else [],
                )
            self.client.log_text(run_id, resolved_yaml, "config.yaml")
        if frozen.user_attrs.get("error"):
            self.client.log_text(run_id, str(frozen.user_attrs["error"]), "error.txt")
        for key, value in frozen.params.items():
            self.client.set_tag(run_id, f"optuna.param.{key.lstrip('+')}", str(value))
        self.client.set_terminated(run_id, MLFLOW_STATUS.get(frozen.state, "FAILED"))
        return run_id

    def finish(
        self,
        study: optuna.Study,
        sweep_dir: Path,
        results: dict[str, Any],
        status: str = "FINISHED",
    ) -> None:
        """Best params and value, the trials table and Optuna's plots on the parent run."""
        if not self.enabled or self.parent_id is None:
            return
        from mlflow.entities import Metric, Param

        now = int(time.time() * 1000)
        best = (results.get("best_params") or {}).items()
        params = [Param(f"best.{k.lstrip('+')}", str(v)) for k, v in best]
        metrics = []
        if results.get("best_value") is not None:
            metrics = [
                Metric("best_time_per_sample_ms", float(results["best_value"]), now, 0),
                Metric("best_trial_number", float(results["best_trial_number"]), now, 0),
            ]
        self.client.log_batch(self.parent_id, metrics=metrics, params=params)
        self.client.log_artifact(self.parent_id, str(sweep_dir / "optimization_results.yaml"))
        with tempfile.TemporaryDirectory() as tmp:
            frame = study.trials_dataframe()
            frame.to_csv(Path(tmp) / "trials.csv", index=False)
            for name in save_plots(study, Path(tmp)):
                _log.debug("plot %s", name)
            self.client.log_artifacts(self.parent_id, tmp)
        self.client.set_terminated(self.parent_id, status)

    def record_orphans(self, study: optuna.Study, numbers: list[int]) -> None:
        """Record trials a dead sweep left RUNNING: a FAILED child under the dead sweep's
        parent run (ended KILLED if it was left RUNNING too), so MLflow agrees with Optuna."""
        if not self.enabled or not numbers:
            return
        for number in numbers:
            frozen = study.trials[number]
            parent = frozen.user_attrs.get(PARENT_RUN) or self.parent_id
            with contextlib.suppress(Exception):  # the dead sweep's run may be elsewhere
                old = self.client.get_run(str(parent))
                if old.info.status == "RUNNING":
                    self.client.set_terminated(old.info.run_id, "KILLED")
            run = self.client.create_run(
                self.experiment_id,
                run_name=f"trial {number}",
                tags={
                    "mlflow.parentRunId": str(parent),
                    "loadertune.kind": "trial",
                    "optuna.trial_number": str(number),
                    "optuna.state": frozen.state.name,
                    "reason": str(frozen.user_attrs.get("reason", "interrupted")),
                },
            )
            self.client.set_terminated(run.info.run_id, "FAILED")

    def log_verdict(
        self,
        rec: Any,
        assurance: Assurance,
        markdown: str,
        sweep_dir: Path,
        guess: Guess | None = None,
        guess_measured_ms: float | None = None,
    ) -> None:
        """The verdict on the parent run: tags, verdict.md, best_loader.yaml and its plot.

        Metrics: ``verdict_time_per_sample_ms`` and ``verdict_samples_per_s`` (medians of
        the recommendation's repeats: what ``scripts/train.py`` should reproduce),
        ``verdict_tolerance`` (the noise allowed for), ``verdict_noise`` (the noise measured), the
        tags ``verdict.confidence`` and ``verdict.confidence_why``, and the model-based guess
        against its measurement
        (``guess_num_workers``, ``guess_time_per_sample_ms``,
        ``guess_measured_time_per_sample_ms``).
        """
        if not self.enabled or self.parent_id is None:
            return
        c = rec.chosen
        if c.samples_per_s:
            rate = statistics.median(c.samples_per_s)
            self.client.log_metric(self.parent_id, "verdict_samples_per_s", rate)
        if guess:
            self.client.log_metric(self.parent_id, "guess_num_workers", guess.workers)
            self.client.log_metric(
                self.parent_id, "guess_time_per_sample_ms", guess.time_per_sample_ms
            )
            self.client.set_tag(self.parent_id, "guess.bound", guess.bound.value)
        if guess_measured_ms is not None:
            self.client.log_metric(
                self.parent_id, "guess_measured_time_per_sample_ms", guess_measured_ms
            )
        self.client.set_tag(self.parent_id, "verdict.num_workers", str(c.workers))
        self.client.set_tag(self.parent_id, "verdict.trial", str(c.trial.number))
        self.client.set_tag(self.parent_id, "verdict.bottleneck", c.bottleneck)
        self.client.set_tag(self.parent_id, "verdict.why", c.why)
        self.client.set_tag(self.parent_id, "verdict.confidence", assurance.level.value)
        self.client.set_tag(self.parent_id, "verdict.confidence_why", assurance.why)
        if assurance.settle:
            self.client.set_tag(self.parent_id, "verdict.settle", assurance.settle)
        self.client.log_metric(self.parent_id, "verdict_noise", rec.noise)
        self.client.set_tag(self.parent_id, "mlflow.note.content", markdown)
        self.client.log_metric(self.parent_id, "verdict_time_per_sample_ms", c.median)
        self.client.log_metric(self.parent_id, "verdict_tolerance", rec.tolerance)
        for name in ("verdict.md", "best_loader.yaml", "verdict.png"):
            self.client.log_artifact(self.parent_id, str(sweep_dir / name))

    def abort(self, status: str = "KILLED") -> None:
        """End the parent run when the sweep stops early (Ctrl-C, an error)."""
        if self.enabled and self.parent_id is not None:
            self.client.set_terminated(self.parent_id, status)


def partial_metrics(steps: list[StepRecord]) -> dict[str, float]:
    """Summary of the steps a stopped trial managed (none if it timed nothing)."""
    if not steps:
        return {}
    s = summarize(steps)
    return {
        "time_per_sample_ms": s.time_per_sample_ms,
        "samples_per_s": s.samples_per_s,
        "step_time_ms_p50": s.step_time_ms_p50,
        "step_time_ms_p90": s.step_time_ms_p90,
        "data_wait_ms_p50": s.data_wait_ms_p50,
        "data_wait_fraction": s.data_wait_fraction,
        "timed_steps": float(s.steps),
    }


def save_plots(study: optuna.Study, out: Path) -> list[str]:
    """Optuna's optimisation history, importances, parallel coordinates and slice, as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as ovm

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    plots: dict[str, Any] = {
        "optimization_history.png": ovm.plot_optimization_history,
        "param_importances.png": ovm.plot_param_importances,
        "parallel_coordinate.png": ovm.plot_parallel_coordinate,
        "slice.png": ovm.plot_slice,
    }
    saved = []
    for name, plot in plots.items():
        if name == "param_importances.png" and (len(complete) < 2 or not _varied(complete)):
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ax = plot(study)
            figure = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
            figure.savefig(out / name, dpi=100, bbox_inches="tight")
            plt.close(figure)
            saved.append(name)
        except (ValueError, RuntimeError, ZeroDivisionError) as exc:
            _log.info("skipped %s: %s", name, exc)
    return saved


def _varied(trials: list[FrozenTrial]) -> bool:
    keys = {k for t in trials for k in t.params}
    return any(len({str(t.params.get(k)) for t in trials}) > 1 for k in keys)


def results_yaml(study: optuna.Study, storage: str) -> dict[str, Any]:
    """The content of ``optimization_results.yaml``, in the official plugin's shape and more."""
    data: dict[str, Any] = {
        "name": "loadertune",
        "study_name": study.study_name,
        "storage": storage,
        "best_params": None,
        "best_value": None,
        "best_trial_number": None,
    }
    try:
        best = study.best_trial
    except ValueError:
        return data
    data["best_params"] = dict(best.params)
    data["best_value"] = best.value
    data["best_trial_number"] = best.number
    return data


def write_results(sweep_dir: Path, data: dict[str, Any]) -> Path:
    """Write ``optimization_results.yaml`` into the sweep directory."""
    path = sweep_dir / "optimization_results.yaml"
    OmegaConf.save(OmegaConf.create(data), path)
    return path
