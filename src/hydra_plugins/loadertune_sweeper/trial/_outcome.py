"""One trial, answered and recorded: refused, repeated or measured; then told and kept.

A claimed trial's settings become overrides (``plan._sweep_plan``); a setting that cannot be
valid is refused (PRUNED, ``invalid_config``), settings equal in effect to an earlier trial's are
answered from that measurement (``repeat_of``), the rest are measured in a trial process.
Then Optuna is told, and MLflow and the console get the record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import optuna
from omegaconf import DictConfig, OmegaConf, open_dict
from optuna.trial import TrialState

from loadertune._lazy import mlflow_exceptions
from loadertune.checks import validate
from loadertune.config import RunConfig, effective_key, to_run_config
from loadertune.errors import ConfigError
from loadertune.record import INFEASIBLE, Reason, error_signature

from .. import _optuna_private
from .._keys import Tag, TrialAttr, TrialFigures
from ..plan._sweep_plan import Composer, SweepPlan, overrides, suggest
from ..study import _hosts
from ._trial_process import TrialOutcome

if TYPE_CHECKING:
    from ..record._console import SweepView
    from ..record._mlflow_runs import SweepRecorder


# Run a trial process for these settings; the Optuna trial gets pruner reports.
Measure = Callable[[optuna.Trial | None, DictConfig, RunConfig], TrialOutcome]


@dataclass
class Answer:
    """How one trial is answered, before it is told and recorded."""

    trial: optuna.Trial
    state: TrialState
    value: float | None = None
    reason: str | None = None
    error: str | None = None
    yaml: str = ""
    config: RunConfig | None = None
    outcome: TrialOutcome | None = None
    repeat_of: optuna.trial.FrozenTrial | None = None

    @property
    def measured(self) -> bool:
        """A trial process ran (not refused, not a repeat)."""
        return self.outcome is not None

    def signature(self) -> str:
        """The same bug gives the same signature: see :func:`error_signature`."""
        return error_signature(self.error or "")


def answer_trial(
    study: optuna.Study,
    trial: optuna.Trial,
    plan: SweepPlan,
    compose: Composer,
    measure: Measure,
    custom_search_space: str | None = None,
    window: tuple[str, ...] = (),
) -> Answer:
    """Answer a claimed trial's settings: refused, repeated, or measured.

    ``window``: overrides for how long the trial times (``hydra.sweeper.search_window``),
    added to the measured job only: the settings, their effective key and the overrides kept
    with the trial (which the verdict reruns) are the trial's own."""
    values = suggest(trial, plan, custom_search_space, compose.config)
    lines = overrides(values, plan.fixed, plan.accelerator, plan.default_workers)
    trial.set_user_attr(TrialAttr.OVERRIDES, lines)
    job_cfg = compose(lines, job_num=trial.number)
    answer = Answer(trial, TrialState.PRUNED, yaml=_resolved(job_cfg))
    try:
        answer.config = to_run_config(job_cfg)
        validate(answer.config)
    except ConfigError as exc:  # a setting the space should not allow
        answer.reason, answer.error = Reason.INVALID_CONFIG, str(exc)
        return answer
    key = effective_key(answer.config, plan.accelerator)
    trial.set_user_attr(TrialAttr.EFFECTIVE_KEY, key)
    earlier = _same_measurement(study, key, trial.number)
    if earlier is not None:
        return _repeat(answer, earlier)
    if window:  # onto the composed job: a second composition costs a third of a second
        with open_dict(job_cfg):
            job_cfg.merge_with(OmegaConf.from_dotlist(list(window)))
        answer.yaml = _resolved(job_cfg)
        answer.config = to_run_config(job_cfg)
    outcome = measure(trial, job_cfg, answer.config)
    answer.outcome = outcome
    answer.reason, answer.error = outcome.reason, outcome.error
    if outcome.status == "complete" and outcome.result is not None:
        answer.state, answer.value = TrialState.COMPLETE, outcome.result.objective
    elif outcome.status == "pruned" or outcome.reason in INFEASIBLE:
        answer.state = TrialState.PRUNED
    else:
        answer.state = TrialState.FAIL
    return answer


def _resolved(job_cfg: DictConfig) -> str:
    """The job's config as it runs (Hydra's own node left out), for the child run's record."""
    return OmegaConf.to_yaml({k: v for k, v in job_cfg.items() if k != "hydra"}, resolve=True)


# The trials whose answer stands for every later trial of the same settings: a measurement,
# or a pruning (the pruner, a memory budget, an infeasible setting) that measuring it again
# would only repeat. A failed trial (a crash) is not an answer: it may be tried again.
ANSWERED = (TrialState.COMPLETE, TrialState.PRUNED)


def _same_measurement(study: optuna.Study, key: str, number: int) -> Any:
    """The first trial with these effective settings that has an answer (see ``ANSWERED``);
    the original, never a repeat, so every repeat names the trial that measured."""
    for t in study.get_trials(deepcopy=False, states=ANSWERED):
        if (
            t.number != number
            and t.user_attrs.get(TrialAttr.EFFECTIVE_KEY) == key
            and t.user_attrs.get(TrialAttr.REPEAT_OF) is None
        ):
            return t
    return None


def _repeat(answer: Answer, earlier: optuna.trial.FrozenTrial) -> Answer:
    """Answer the trial from ``earlier``, which had the same effective settings: the same
    state, value, reason and pruner reports, so the sampler learns from it as from the
    original (TPE ranks a pruned trial by its last report), and no process is started."""
    trial = answer.trial
    trial.set_user_attr(TrialAttr.REPEAT_OF, earlier.number)
    for step, value in sorted(earlier.intermediate_values.items()):
        trial.report(value, step)
    answer.repeat_of, answer.state = earlier, earlier.state
    answer.value = earlier.value if earlier.state == TrialState.COMPLETE else None
    reason = earlier.user_attrs.get(TrialAttr.REASON)
    answer.reason = str(reason) if reason else None
    return answer


def tell_and_record(
    study: optuna.Study,
    v: Answer,
    recorder: SweepRecorder,
    view: SweepView,
    index: int,
) -> None:
    """Tell Optuna, then record the trial in MLflow and on the console."""
    trial, outcome = v.trial, v.outcome
    if v.reason:
        trial.set_user_attr(TrialAttr.REASON, str(v.reason))
    if v.error:
        trial.set_user_attr(TrialAttr.ERROR, v.error[-4000:])
    if outcome is not None:
        _keep_outcome(trial, outcome)
    frozen = _optuna_private.tell(
        study, trial, v.value if v.state == TrialState.COMPLETE else None, v.state
    )
    tags: dict[str, str] = {Tag.REASON: str(v.reason)} if v.reason else {}
    tags.update(_hosts.run_tags(frozen.user_attrs))
    repeat_of = v.repeat_of.number if v.repeat_of is not None else None
    if repeat_of is not None:
        tags[Tag.REPEAT_OF] = str(repeat_of)
    if outcome is not None and (outcome.leaked_processes or outcome.shm_files_removed):
        tags["cleanup"] = (
            f"killed {outcome.leaked_processes} leftover processes, removed "
            f"{outcome.shm_files_removed} /dev/shm files"
        )
    result = outcome.result if outcome else None

    try:
        recorder.record_trial(
            frozen, v.config, result, outcome.steps if outcome else [], v.yaml, tags, repeat_of
        )
    except mlflow_exceptions.MlflowException as exc:  # Optuna holds the trial; say so and carry on
        view.note(f"trial {frozen.number} is in Optuna but MLflow refused it: {exc}")
    view.trial(index, frozen, result)


def _keep_outcome(trial: optuna.Trial, outcome: TrialOutcome) -> None:
    """Keep with the trial what its process left behind and what the report plots."""
    r = outcome.result
    figures = TrialFigures(
        wall_s=round(outcome.wall_s, 3),
        leaked_processes=outcome.leaked_processes,
        shm_files_removed=outcome.shm_files_removed,
        oom_kills=outcome.oom_kills,
        timed_steps=len(outcome.steps),
        peak_memory_mb=round(r.peak_memory_mb if r else outcome.peak_memory_bytes / 2**20, 1),
    )
    if r is not None:
        figures = replace(
            figures,
            cpu_percent_mean=round(r.cpu_percent_mean, 1),
            data_wait_fraction=round(r.summary.data_wait_fraction, 4),
            samples_per_s=round(r.summary.samples_per_s, 1),
            other_cpu_percent=round(r.other_cpu_percent, 1),
            steal_percent=round(r.steal_percent, 1),
            data_wait_ms_p99=round(r.summary.data_wait_ms_p99, 3),
            long_waits_per_1000_steps=round(r.summary.long_waits_per_1000_steps, 1),
        )
    elif outcome.interference is not None:  # pruned: the sweep metered its timed steps
        figures = replace(
            figures,
            other_cpu_percent=round(outcome.interference.other_cpu_percent, 1),
            steal_percent=round(outcome.interference.steal_percent, 1),
        )
    for name, value in figures.as_attrs().items():
        trial.set_user_attr(name, value)
