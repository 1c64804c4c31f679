"""On every start, repair what a dead sweep left: RUNNING MLflow runs, missing baselines.

A sweep killed with -9, by the OOM killer or a full disk never ends its parent run, and a
child run it was writing stays RUNNING too, whatever phase it died in (a trial, the
verdict, the export). Optuna's orphaned trials are failed elsewhere (``study._storage``); this is
MLflow's half. A parent counts as dead when it ran on this host and its process is gone,
or, while this sweep holds the host's timing lock, whatever its process: no other sweep can
be timing here then. Its RUNNING children are closed with it, and so is a child whose parent
has already ended.
"""

from __future__ import annotations

import contextlib
import socket
from typing import TYPE_CHECKING, Any

import optuna
import psutil

from loadertune.machine import usable_cpus

from .. import _optuna_private
from .._keys import RunKind, Tag
from ..plan import _baselines
from ..plan._baselines import Role

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from ..record._mlflow_runs import SweepRecorder

CLOSED_WHY = "closed when the study was next started: the sweep process that owned it had died"


def close_dead_runs(
    client: MlflowClient, experiment_id: str, study_name: str, own_run: str | None, locked: bool
) -> list[str]:
    """End (KILLED) the dead sweeps' RUNNING parent and child runs of ``study_name``; their ids."""
    running = client.search_runs(
        [experiment_id],
        filter_string=(
            f"attributes.status = 'RUNNING' and tags.`optuna.study_name` = '{study_name}'"
        ),
        max_results=1000,
    )
    parents = [r for r in running if r.data.tags.get(Tag.KIND) == RunKind.SWEEP]
    dead = {r.info.run_id for r in parents if r.info.run_id != own_run and _dead(r, locked)}
    closed = []
    for run in running:
        run_id = run.info.run_id
        parent = run.data.tags.get(Tag.PARENT)
        orphan = parent is not None and parent != own_run and _ended(client, parent, dead)
        if run_id in dead or (run.data.tags.get(Tag.KIND) == RunKind.TRIAL and orphan):
            client.set_tag(run_id, Tag.CLOSED, CLOSED_WHY)
            client.set_terminated(run_id, "KILLED")
            closed.append(run_id)
    return closed


def _dead(run: Any, locked: bool) -> bool:
    """Whether a parent run's sweep process is gone (see the module's docstring)."""
    if run.data.tags.get(Tag.HOST) != socket.gethostname():
        return False  # another host's sweep: its own next start closes it
    if locked:
        return True
    pid = run.data.tags.get(Tag.PID)
    return pid is not None and pid.isdigit() and not psutil.pid_exists(int(pid))


def _ended(client: MlflowClient, parent: str, dead: set[str]) -> bool:
    """The parent is being closed, has ended, or cannot be found."""
    if parent in dead:
        return True
    with contextlib.suppress(Exception):
        return bool(client.get_run(parent).info.status != "RUNNING")
    return True


def queue_baselines(
    study: optuna.Study, space: dict[str, Any], sampler: Any, nproc_per_node: int = 1
) -> list[Role]:
    """The baselines at the front of a new study, or those a resumed one lacks (queued
    again); a grid measures every point anyway, and a new study whose trials the user queued
    runs those. The roles queued again."""
    if _optuna_private.is_exhaustive(sampler):
        return []
    if not study.trials:
        _baselines.enqueue_initial(study, space, usable_cpus(), nproc_per_node)
        return []
    if not any(t.state.is_finished() for t in study.get_trials(deepcopy=False)):
        return []  # trials the user queued into a new study: theirs to choose
    return _baselines.enqueue_missing(study, space, usable_cpus(), nproc_per_node)


def resumed(
    study: optuna.Study, requeued: list[Role], recorder: SweepRecorder, locked: bool
) -> list[str]:
    """Close the dead sweeps' RUNNING runs; the lines that say what a resume repaired."""
    lines = []
    if requeued:
        names = ", ".join(role.label for role in requeued)
        lines.append(f"queued again, missing from the resumed study: {names}")
    if recorder.enabled:
        closed = close_dead_runs(
            recorder.client, recorder.experiment_id, study.study_name, recorder.parent_id, locked
        )
        if closed:
            lines.append(f"closed {len(closed)} MLflow run(s) a dead sweep left RUNNING")
    return lines
