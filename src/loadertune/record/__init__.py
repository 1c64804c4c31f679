"""What a trial measured or how it failed, and where that goes: MLflow, files, the terminal,
the sweep that started it.

Rooms (the names other packages use are re-exported below, each room imported on the first
use of one of its names, so importing the package imports none of them):

- ``_channel``: the line from a trial's process back to the sweep that started it.
- ``_failures``: how a trial can fail, in one documented vocabulary, and how to tell which way it
  failed.
- ``_mlflow_store``: an MLflow store opened in this process; a SQLite one set up once, under a lock
  beside it.
- ``_report``: what a person sees in the terminal: a progress bar while steps run, then one summary
  table.
- ``_result``: what one trial measured: typed, plain data, independent of how it is recorded.
- ``_result_stores``: where results go, checked before anything runs; files written whole or not at
  all.
- ``_tracking``: record a trial in MLflow: params, summary metrics, per-step series, machine tags,
  config.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadertune._lazy import lazy_package

__all__ = [
    "INFEASIBLE",
    "REASONS",
    "RECURRING",
    "SERIES",
    "USER_BUGS",
    "InfeasibleSetting",
    "MessageKind",
    "RankFigures",
    "RankRaised",
    "Reason",
    "StepError",
    "StoreUnavailable",
    "TrialFailure",
    "TrialResult",
    "TrialStatus",
    "artifact_root",
    "bound_tracking_retries",
    "bounded_tracking_retries",
    "check_tracking_server",
    "check_writable",
    "classify",
    "classify_exit",
    "describe_os_error",
    "error_signature",
    "failed_status",
    "flatten",
    "is_disk_full",
    "log_trial",
    "mlflow_run",
    "open_store",
    "param_text",
    "print_summary",
    "says_disk_full",
    "sqlite_file",
    "step_failure",
    "step_progress",
    "step_series",
    "summary_metrics",
    "tracking_uri",
    "trial_params",
    "ui_hint",
    "use_experiment",
    "wide_console",
    "worker_death",
    "write_text_atomically",
]

if TYPE_CHECKING:
    from loadertune.record._channel import MessageKind, TrialStatus
    from loadertune.record._failures import (
        INFEASIBLE,
        REASONS,
        RECURRING,
        USER_BUGS,
        InfeasibleSetting,
        RankRaised,
        Reason,
        StepError,
        TrialFailure,
        classify,
        classify_exit,
        error_signature,
        failed_status,
        step_failure,
        worker_death,
    )
    from loadertune.record._mlflow_store import open_store, sqlite_file
    from loadertune.record._report import print_summary, step_progress, wide_console
    from loadertune.record._result import RankFigures, TrialResult, summary_metrics
    from loadertune.record._result_stores import (
        StoreUnavailable,
        bound_tracking_retries,
        bounded_tracking_retries,
        check_tracking_server,
        check_writable,
        describe_os_error,
        is_disk_full,
        says_disk_full,
        write_text_atomically,
    )
    from loadertune.record._tracking import (
        SERIES,
        artifact_root,
        flatten,
        log_trial,
        mlflow_run,
        param_text,
        step_series,
        tracking_uri,
        trial_params,
        ui_hint,
        use_experiment,
    )

__getattr__ = lazy_package(__name__, __file__)
