"""The Optuna study a sweep runs: where it is stored, what it is called, and resuming it.

By default the study is an SQLite file under ``outputs/`` and its name is derived from the
workload and the host, so running the same command again continues the same study.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from pathlib import Path
from typing import Any

import optuna
import psutil
from optuna.trial import TrialState

OWNER_HOST = "owner_host"
OWNER_PID = "owner_pid"
OWNER_STARTED = "owner_started"
REASON = "reason"


def absolute_storage(url: str | None, output_root: str) -> str:
    """The storage URL with any SQLite path made absolute (Hydra may change directory per job)."""
    if url is None:
        path = Path(output_root).expanduser().resolve() / "optuna.db"
        path.parent.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{path}"
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/") and url != prefix + ":memory:":
        path = Path(url[len(prefix) :]).expanduser().resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        return f"{prefix}{path}"
    return url


def default_study_name(choices: dict[str, str], measured: dict[str, Any]) -> str:
    """``<dataset>-<storage>-<model>@<host>-<digest of everything else that is measured>``.

    The digest covers the fixed settings (dataset knobs, trial length, fixed loader keys), so
    a different workload never silently joins a study whose timings it cannot be compared to.
    """
    digest = hashlib.sha256(json.dumps(measured, sort_keys=True, default=str).encode())
    workload = "-".join(choices[g] for g in ("dataset", "storage", "model"))
    return f"{workload}@{socket.gethostname()}-{digest.hexdigest()[:8]}"


def open_study(
    storage: str,
    name: str,
    direction: Any,
    sampler: optuna.samplers.BaseSampler,
    pruner: optuna.pruners.BasePruner,
) -> optuna.Study:
    """Create the study, or load it when it exists (resume)."""
    directions = list(direction) if isinstance(direction, list | tuple) else None
    return optuna.create_study(
        storage=storage,
        study_name=name,
        sampler=sampler,
        pruner=pruner,
        direction=None if directions else direction,
        directions=directions,
        load_if_exists=True,
    )


def claim(trial: optuna.trial.Trial) -> None:
    """Mark the trial as owned by this process, so a later run can tell if its owner died."""
    me = psutil.Process()
    trial.set_user_attr(OWNER_HOST, socket.gethostname())
    trial.set_user_attr(OWNER_PID, me.pid)
    trial.set_user_attr(OWNER_STARTED, me.create_time())


def fail_orphaned_trials(study: optuna.Study) -> list[int]:
    """Mark FAIL the RUNNING trials whose owning process on this host is gone.

    Optuna's heartbeats only work inside ``optimize()``; an ask/tell sweep that was killed
    leaves its trial RUNNING forever. Trials owned by a live process, or by another host,
    are left alone: they may still be running.
    """
    failed = []
    for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        attrs = frozen.user_attrs
        if attrs.get(OWNER_HOST) not in (None, socket.gethostname()):
            continue
        if _alive(attrs.get(OWNER_PID), attrs.get(OWNER_STARTED)):
            continue
        trial = optuna.trial.Trial(study, frozen._trial_id)
        trial.set_user_attr(REASON, "interrupted")
        study.tell(frozen.number, state=TrialState.FAIL)
        failed.append(frozen.number)
    return failed


def _alive(pid: Any, started: Any) -> bool:
    if not isinstance(pid, int) or pid == os.getpid():
        return False
    try:
        proc = psutil.Process(pid)
        return started is None or abs(proc.create_time() - float(started)) < 1.0
    except psutil.Error:
        return False


def finished_count(study: optuna.Study) -> int:
    """Trials that ended (complete, pruned or failed), across all runs of the study."""
    done = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    return len(study.get_trials(deepcopy=False, states=done))
