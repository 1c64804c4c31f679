"""Every name the sweeper stores and reads back: Optuna trial and study attrs, MLflow tags,
the keys of ``optimization_results.yaml``, and the figures kept with each trial.

Each name is spelled here once. The names are plain strings, grouped by where they are
stored (not enums: they go as they are into Optuna, MLflow and YAML, and studies and runs
written before keep their meaning).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Mapping


class TrialAttr:
    """Optuna user attrs of one trial."""

    OVERRIDES: Final = "overrides"  # the Hydra overrides the trial ran with
    EFFECTIVE_KEY: Final = "effective_key"  # settings equal in effect share it
    REPEAT_OF: Final = "repeat_of"  # answered from that earlier trial's measurement
    REASON: Final = "reason"  # why it did not complete (``loadertune.record._failures.Reason``)
    ERROR: Final = "error"  # the end of its traceback
    BASELINE: Final = "baseline"  # the advice it stands for (``plan._baselines.Role``)
    BLOCK_MS: Final = "block_ms"  # time per sample of its blocks of steps, for the pruner
    WALKED: Final = "walked"  # queued by walking a small space (``plan._enumerate``)
    STEERED_FROM: Final = "steered_from"  # queued nearest a setting the sampler kept asking for
    REFINED: Final = "refined"  # queued by ``plan._refine``: the bisection of counts, the depth
    PARENT_RUN: Final = "mlflow_parent_run_id"  # the sweep's MLflow parent run
    OWNER_HOST: Final = "owner_host"  # the host of the sweep that claimed it
    OWNER_PID: Final = "owner_pid"
    OWNER_STARTED: Final = "owner_started"
    MACHINE: Final = "machine"  # the fingerprint of its host and its class name, one dict


class StudyAttr:
    """Optuna user attrs of the study."""

    VERDICT: Final = "verdict"  # ``started`` then ``given``: started on a start means it was cut
    GUESS: Final = "guess"  # the model-based guess, as a dict
    WORKERS_RANGE: Final = "workers_range"  # the num_workers range the guess set
    FINGERPRINT: Final = "machine_fingerprint"  # the machine class the study measures
    SEARCH_STOPPED: Final = "search_stopped"  # why the search stopped early (``plan._ceiling``)
    ENOUGH_WORKERS: Final = "enough_workers"  # the workers that ceiling found enough, if any


class Tag:
    """MLflow tags the sweeper writes and reads back."""

    KIND: Final = "loadertune.kind"  # ``sweep`` (a parent run) or ``trial`` (a child run)
    PID: Final = "loadertune.pid"  # the sweep process of a parent run
    CLOSED: Final = "loadertune.closed"  # why a later start ended a run a dead sweep left RUNNING
    RECOVERED: Final = "loadertune.recovered"  # a trial MLflow lacked, added from Optuna's record
    PARENT: Final = "mlflow.parentRunId"
    NOTE: Final = "mlflow.note.content"
    STUDY_NAME: Final = "optuna.study_name"
    TRIAL_NUMBER: Final = "optuna.trial_number"
    TRIAL_STATE: Final = "optuna.state"
    REPEAT_OF: Final = "repeat_of"  # a child run answered from another trial (older sweeps)
    ALSO_ASKED_AS: Final = "also_asked_as"  # the later trials this run's measurement answered
    REASON: Final = "reason"
    RECOMMENDED: Final = "recommended"  # ``true`` on the child run the verdict picked
    HOST: Final = "machine.host"
    MACHINE_CLASS: Final = "machine.class"
    SWEEP_HOST: Final = "machine.sweep_host"


class RunKind:
    """The value of :attr:`Tag.KIND`."""

    SWEEP: Final = "sweep"
    TRIAL: Final = "trial"


class Results:
    """Top-level keys of ``optimization_results.yaml``."""

    NAME: Final = "name"
    STUDY_NAME: Final = "study_name"
    STORAGE: Final = "storage"
    BEST_PARAMS: Final = "best_params"
    BEST_VALUE: Final = "best_value"
    BEST_TRIAL_NUMBER: Final = "best_trial_number"
    RECOMMENDED: Final = "recommended"


class Recommended:
    """Keys of the ``recommended:`` block of ``optimization_results.yaml`` (the verdict's pick)."""

    TRIAL_NUMBER: Final = "trial_number"
    PARAMS: Final = "params"  # the searched values, plain keys
    LOADER: Final = "loader"  # the loader settings exported, as best_loader.yaml has them
    TIME_PER_SAMPLE_MS: Final = "time_per_sample_ms"
    SAMPLES_PER_S: Final = "samples_per_s"
    REPEATS: Final = "repeats"
    CONFIDENCE: Final = "confidence"
    CONFIDENCE_WHY: Final = "confidence_why"
    WRITTEN_TO: Final = "written_to"  # best_loader.yaml, then the loader=best file
    AGREED_BY: Final = "agreed_by"  # a fan-out's joined pick: the workers whose verdicts agree


@dataclass(frozen=True)
class TrialFigures:
    """What a measured trial's process left behind, kept with the Optuna trial (user attrs
    under these field names) for the verdict, the plots and a resumed study."""

    wall_s: float
    leaked_processes: float
    shm_files_removed: float
    oom_kills: float
    timed_steps: int
    peak_memory_mb: float
    cpu_percent_mean: float | None = None
    data_wait_fraction: float | None = None
    samples_per_s: float | None = None
    other_cpu_percent: float | None = None
    steal_percent: float | None = None
    data_wait_ms_p99: float | None = None  # the tail of the wait for a batch
    long_waits_per_1000_steps: float | None = None  # steps that stalled for data

    def as_attrs(self) -> dict[str, Any]:
        """The user attrs to set: every figure that was measured."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def of(cls, user_attrs: Mapping[str, Any]) -> TrialFigures | None:
        """The figures kept with a trial; None for a trial no process measured."""
        if "wall_s" not in user_attrs:
            return None
        return cls(**{f.name: user_attrs[f.name] for f in fields(cls) if f.name in user_attrs})
