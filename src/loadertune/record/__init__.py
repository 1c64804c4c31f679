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

from loadertune import _lazy

__all__ = [
    "INFEASIBLE",
    "REASONS",
    "SERIES",
    "USER_BUGS",
    "InfeasibleSetting",
    "MessageKind",
    "RankFigures",
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
        USER_BUGS,
        InfeasibleSetting,
        Reason,
        StepError,
        TrialFailure,
        classify,
        classify_exit,
        error_signature,
        failed_status,
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

_WHERE = {
    "artifact_root": "_tracking",
    "bound_tracking_retries": "_result_stores",
    "bounded_tracking_retries": "_result_stores",
    "check_tracking_server": "_result_stores",
    "check_writable": "_result_stores",
    "classify": "_failures",
    "classify_exit": "_failures",
    "describe_os_error": "_result_stores",
    "error_signature": "_failures",
    "failed_status": "_failures",
    "flatten": "_tracking",
    "INFEASIBLE": "_failures",
    "InfeasibleSetting": "_failures",
    "is_disk_full": "_result_stores",
    "log_trial": "_tracking",
    "MessageKind": "_channel",
    "mlflow_run": "_tracking",
    "open_store": "_mlflow_store",
    "param_text": "_tracking",
    "print_summary": "_report",
    "RankFigures": "_result",
    "Reason": "_failures",
    "REASONS": "_failures",
    "says_disk_full": "_result_stores",
    "SERIES": "_tracking",
    "sqlite_file": "_mlflow_store",
    "step_progress": "_report",
    "StepError": "_failures",
    "StoreUnavailable": "_result_stores",
    "step_series": "_tracking",
    "summary_metrics": "_result",
    "tracking_uri": "_tracking",
    "trial_params": "_tracking",
    "TrialFailure": "_failures",
    "TrialResult": "_result",
    "TrialStatus": "_channel",
    "ui_hint": "_tracking",
    "use_experiment": "_tracking",
    "USER_BUGS": "_failures",
    "wide_console": "_report",
    "worker_death": "_failures",
    "write_text_atomically": "_result_stores",
}

__getattr__ = _lazy(__name__, _WHERE)
