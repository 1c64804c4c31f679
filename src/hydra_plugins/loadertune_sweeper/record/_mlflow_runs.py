"""What a sweep leaves behind: MLflow parent and child runs, results file, plots, tables.

Only the sweep process calls this module: trial processes report over a pipe, so a trial
killed by the kernel is still recorded here, with what it measured before it died.
"""

from __future__ import annotations

import contextlib
import socket
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from omegaconf import OmegaConf
from optuna.trial import FrozenTrial, TrialState

from loadertune._lazy import mlflow, mlflow_entities
from loadertune.config import RunConfig, TrackingConfig
from loadertune.measure import StepRecord, summarize
from loadertune.record import (
    Reason,
    TrialResult,
    artifact_root,
    log_trial,
    param_text,
    step_series,
    summary_metrics,
    tracking_uri,
    trial_params,
    ui_hint,
    use_experiment,
    write_text_atomically,
)

from .._keys import Results, RunKind, Tag, TrialAttr
from ..study import _hosts
from . import _verdict_record
from ._plots import save_plots
from ._server_loss import guarded

if TYPE_CHECKING:
    from loadertune.decision import Guess

    from ..verdict._rounds import Verdict

OBJECTIVE = "time per sample (ms)"  # the objective's name and unit on Optuna's plots
# Parent-run metric: trials answered from an earlier trial of the same settings, no child run.
REPEATS_ANSWERED = "repeats_answered"
MLFLOW_STATUS = {
    TrialState.COMPLETE: "FINISHED",
    TrialState.PRUNED: "KILLED",
    TrialState.FAIL: "FAILED",
}


class SweepRecorder:
    """One MLflow parent run per sweep invocation, one child run per trial measured.

    A child run starts and ends when its trial did. A repeat (``repeat_of``, answered from an
    earlier trial of the same effective settings) is no row of its own: the runs table shows
    one row per measured setting. The parent run counts repeats (metric
    ``repeats_answered``) and the answering run names them (tag ``also_asked_as``); the
    Optuna study keeps every trial.
    """

    def __init__(
        self,
        tracking: TrackingConfig,
        output_root: str,
        study: optuna.Study,
        storage: str,
        sampler: str,
    ) -> None:
        self.enabled = tracking.enabled
        self.parent_id: str | None = None
        self.study_name = study.study_name
        self.runs: dict[int, str] = {}  # trial number -> its child run, in this sweep
        self.repeats_answered = 0  # trials answered from an earlier one, in this sweep
        self.asked_again: dict[int, list[int]] = {}  # trial number -> its repeats, here
        self.recommended: dict[str, Any] | None = None  # the verdict's pick, once given
        self.lost = ""  # why the tracking server is gone, once a write found it gone
        if not self.enabled:
            return
        self.uri = tracking_uri(tracking, output_root)
        self.artifacts = artifact_root(tracking, output_root)
        self.experiment_id = use_experiment(tracking, output_root)  # opens the store first
        self.client = mlflow.MlflowClient(self.uri)
        run = self.client.create_run(
            self.experiment_id,
            run_name=f"sweep {study.study_name} on {socket.gethostname()}",
            tags={
                **_hosts.host_tags(),
                Tag.KIND: RunKind.SWEEP,
                Tag.STUDY_NAME: study.study_name,
                "optuna.storage": storage,
                "optuna.sampler": sampler,
            },
        )
        self.parent_id = run.info.run_id

    @guarded
    def record_trial(
        self,
        frozen: FrozenTrial,
        config: RunConfig | None,
        result: TrialResult | None,
        steps: list[StepRecord],
        resolved_yaml: str,
        tags: dict[str, str],
        repeat_of: int | None = None,
    ) -> str | None:
        """Create the trial's child run with its state, reason and whatever it measured;
        for a repeat (``repeat_of``: the earlier trial that answered it), count it instead."""
        if not self.enabled:
            return None
        if repeat_of is not None:
            self._count_repeat(frozen.number, repeat_of)
            return None

        params = frozen.params.items()
        run = self.client.create_run(
            self.experiment_id,
            start_time=_ms(frozen.datetime_start),
            run_name=f"trial {frozen.number}",
            tags={
                **child_tags(str(self.parent_id), self.study_name, frozen),
                **{f"optuna.param.{k.lstrip('+')}": param_text(v) for k, v in params},
                **tags,
            },
        )
        run_id: str = run.info.run_id
        if config is not None and result is not None:
            log_trial(run_id, config, result, resolved_yaml)
        else:
            self._log_unmeasured(run_id, frozen, config, steps, resolved_yaml)
        if frozen.user_attrs.get(TrialAttr.ERROR):
            self.client.log_text(run_id, str(frozen.user_attrs[TrialAttr.ERROR]), "error.txt")
        end = _ms(frozen.datetime_complete)
        self.client.set_terminated(run_id, MLFLOW_STATUS.get(frozen.state, "FAILED"), end)
        self.runs[frozen.number] = run_id
        return run_id

    def _count_repeat(self, number: int, repeat_of: int) -> None:
        """A repeat on the parent run (``repeats_answered``) and on the run that answered it,
        when this sweep measured it (``also_asked_as``)."""
        self.repeats_answered += 1
        if self.parent_id is not None:
            self.client.log_metric(
                self.parent_id, REPEATS_ANSWERED, self.repeats_answered, step=self.repeats_answered
            )
        asked = self.asked_again.setdefault(repeat_of, [])
        asked.append(number)
        if repeat_of in self.runs:
            shown = ", ".join(f"#{n}" for n in asked)
            self.client.set_tag(self.runs[repeat_of], Tag.ALSO_ASKED_AS, shown)

    def _log_unmeasured(
        self,
        run_id: str,
        frozen: FrozenTrial,
        config: RunConfig | None,
        steps: list[StepRecord],
        resolved_yaml: str,
    ) -> None:
        """Params and what was measured of a trial with no full result (a stopped one)."""
        now = int(time.time() * 1000)
        params = (
            []
            if config is None
            else [mlflow_entities.Param(k, v[:6000]) for k, v in trial_params(config).items()]
        )
        figures = partial_metrics(steps)
        for key in ("other_cpu_percent", "steal_percent"):  # a pruned trial's, metered
            if key in frozen.user_attrs:
                figures[key] = float(frozen.user_attrs[key])
        metrics = [mlflow_entities.Metric(k, float(v), now, 0) for k, v in figures.items()]
        metrics += step_series(steps, now)
        for i in range(0, max(len(metrics), 1), 1000):
            self.client.log_batch(
                run_id, metrics=metrics[i : i + 1000], params=params if i == 0 else []
            )
        self.client.log_text(run_id, resolved_yaml, "config.yaml")

    def run_of(self, number: int) -> str | None:
        """The child run that measured trial ``number`` of this study: this sweep's, or an
        earlier sweep's (a resumed study); None if none is found."""
        if number in self.runs:
            return self.runs[number]
        found = self.client.search_runs(
            [self.experiment_id],
            filter_string=(
                f"tags.`optuna.study_name` = '{self.study_name}' and "
                f"tags.`optuna.trial_number` = '{number}' and attributes.status = 'FINISHED'"
            ),
            max_results=20,
        )
        measured = [r for r in found if Tag.REPEAT_OF not in r.data.tags]
        return measured[0].info.run_id if measured else None

    @guarded
    def finish(
        self,
        study: optuna.Study,
        sweep_dir: Path,
        results: dict[str, Any],
        status: str = "FINISHED",
    ) -> None:
        """The search's fastest measurement, the trials table and Optuna's plots on the
        parent run, then end it.

        The search's single fastest measurement is named as such: params
        ``search_best.<key>``, metrics ``search_best_time_per_sample_ms`` and
        ``search_best_trial_number``. The recommendation (``recommended.*``) is the verdict's,
        logged by :func:`._verdict_record.log_verdict`.
        """
        if not self.enabled or self.parent_id is None:
            return

        now = int(time.time() * 1000)
        best = (results.get(Results.BEST_PARAMS) or {}).items()
        params = [
            mlflow_entities.Param(f"search_best.{k.lstrip('+')}", param_text(v)) for k, v in best
        ]
        metrics = []
        if results.get(Results.BEST_VALUE) is not None:
            metrics = [
                mlflow_entities.Metric(
                    "search_best_time_per_sample_ms", float(results[Results.BEST_VALUE]), now, 0
                ),
                mlflow_entities.Metric(
                    "search_best_trial_number", float(results[Results.BEST_TRIAL_NUMBER]), now, 0
                ),
            ]
        count = self.repeats_answered
        metrics.append(mlflow_entities.Metric(REPEATS_ANSWERED, float(count), now, count))
        self.client.log_batch(self.parent_id, metrics=metrics, params=params)
        self.client.log_artifact(self.parent_id, str(sweep_dir / "optimization_results.yaml"))
        with tempfile.TemporaryDirectory() as tmp:
            frame = study.trials_dataframe()
            frame.to_csv(Path(tmp) / "trials.csv", index=False)
            save_plots(study, Path(tmp), OBJECTIVE)
            self.client.log_artifacts(self.parent_id, tmp)
        self.client.set_terminated(self.parent_id, status)

    @guarded
    def log_verdict(self, verdict: Verdict, sweep_dir: Path, guess: Guess | None = None) -> None:
        """Keep the verdict's pick for the results file; record it on the parent and child
        runs (:func:`._verdict_record.log_verdict`)."""
        self.recommended = _verdict_record.recommended_block(verdict, sweep_dir)
        _verdict_record.log_verdict(self, verdict, sweep_dir, guess)

    def landing(self) -> list[str]:
        """How to open this sweep in MLflow's UI: the parent run's URL on a tracking
        server, else the command that serves this store and the runs table's URL."""
        if not self.enabled or self.parent_id is None:
            return []

        return ui_hint(self.uri, self.experiment_id, self.parent_id, self.artifacts)

    @guarded
    def record_orphans(self, study: optuna.Study, numbers: list[int]) -> None:
        """Record trials a dead sweep left RUNNING: a FAILED child under the dead sweep's
        parent run (ended KILLED if it was left RUNNING too), so MLflow agrees with Optuna.

        A repeat cut between its answer and its tell (it carries ``repeat_of``) gets none: a
        trial answered from another measured nothing, and has no child run however it ends.
        """
        if not self.enabled or not numbers:
            return
        for number in numbers:
            frozen = study.trials[number]
            if TrialAttr.REPEAT_OF in frozen.user_attrs:
                continue
            parent = frozen.user_attrs.get(TrialAttr.PARENT_RUN) or self.parent_id
            with contextlib.suppress(Exception):  # the dead sweep's run may be elsewhere
                old = self.client.get_run(str(parent))
                if old.info.status == "RUNNING":
                    self.client.set_terminated(old.info.run_id, "KILLED")
            reason = str(frozen.user_attrs.get(TrialAttr.REASON, Reason.INTERRUPTED))
            run = self.client.create_run(
                self.experiment_id,
                run_name=f"trial {number}",
                tags={**child_tags(str(parent), self.study_name, frozen), Tag.REASON: reason},
            )
            self.client.set_terminated(run.info.run_id, "FAILED")

    @guarded
    def abort(self, status: str = "KILLED") -> None:
        """End the parent run when the sweep stops early (Ctrl-C, an error)."""
        if self.enabled and self.parent_id is not None:
            self.client.set_terminated(self.parent_id, status)


def child_tags(parent: str, study_name: str, frozen: FrozenTrial) -> dict[str, str]:
    """What makes a run a trial's child run: its parent, kind, study, number and state.
    Every child run carries all of them, whoever writes it: a start that repairs MLflow
    finds a trial's run by study and number, and adds a copy of any run it cannot find."""
    return {
        Tag.PARENT: parent,
        Tag.KIND: RunKind.TRIAL,
        Tag.STUDY_NAME: study_name,
        Tag.TRIAL_NUMBER: str(frozen.number),
        Tag.TRIAL_STATE: frozen.state.name,
    }


def _ms(moment: datetime | None) -> int | None:
    """A trial's start or end as MLflow's milliseconds since the epoch (None: now)."""
    return None if moment is None else int(moment.timestamp() * 1000)


def partial_metrics(steps: list[StepRecord]) -> dict[str, float]:
    """Summary of the steps a stopped trial managed (none if it timed nothing)."""
    return summary_metrics(summarize(steps)) if steps else {}


def results_yaml(
    study: optuna.Study, storage: str, recommended: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The content of ``optimization_results.yaml``, in the official plugin's shape and more.

    ``best_*`` are Optuna's: the search's single fastest measurement. ``recommended`` is the
    verdict's pick (see :func:`._verdict_record.recommended_block`), None without a verdict.
    """
    data: dict[str, Any] = {
        Results.NAME: "loadertune",
        Results.STUDY_NAME: study.study_name,
        Results.STORAGE: storage,
        Results.BEST_PARAMS: None,
        Results.BEST_VALUE: None,
        Results.BEST_TRIAL_NUMBER: None,
        Results.RECOMMENDED: recommended,
    }
    try:
        best = study.best_trial
    except ValueError:
        return data
    data[Results.BEST_PARAMS] = dict(best.params)
    data[Results.BEST_VALUE] = best.value
    data[Results.BEST_TRIAL_NUMBER] = best.number
    return data


RESULTS_HEADER = (
    "# recommended: the verdict's pick, measured again interleaved with the other candidates:\n"
    "#   the setting to use (also in best_loader.yaml). Null when no verdict ran.\n"
    "# best_params, best_value, best_trial_number: the search's single fastest measurement\n"
    "#   (Optuna's best trial), in the shape of Hydra's Optuna sweeper.\n"
)


def write_results(sweep_dir: Path, data: dict[str, Any]) -> Path:
    """Write ``optimization_results.yaml`` into the sweep directory, with what each key is."""
    path = sweep_dir / "optimization_results.yaml"
    write_text_atomically(path, RESULTS_HEADER + OmegaConf.to_yaml(OmegaConf.create(data)))
    return path
