"""On every start, repair what a dead sweep left: RUNNING MLflow runs, missing baselines,
trials Optuna holds that MLflow lacks (a tracking server lost mid-sweep: ``record_missing``).

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

from loadertune._lazy import mlflow_entities
from loadertune.machine import usable_cpus

from .. import _optuna_private
from .._keys import RunKind, Tag, TrialAttr, TrialFigures
from ..plan import _baselines
from ..plan._baselines import Role
from ..record._mlflow_runs import MLFLOW_STATUS, child_tags
from ..study._storage import OUT_OF_RANGE

if TYPE_CHECKING:
    from collections.abc import Callable

    from mlflow import MlflowClient
    from optuna.trial import FrozenTrial

    from ..record._mlflow_runs import SweepRecorder

CLOSED_WHY = "closed when the study was next started: the sweep process that owned it had died"
CLOSED_AT_END_WHY = (
    "closed by another sweep of the study when it ended: the sweep process that owned it had died"
)
RECOVERED_WHY = (
    "added when the study was next started, from Optuna's record: MLflow could not take the "
    "trial when it ended (the tracking server was gone); figures are those Optuna kept"
)


def close_dead_runs(
    client: MlflowClient,
    experiment_id: str,
    study_name: str,
    own_run: str | None,
    locked: bool,
    why: str = CLOSED_WHY,
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
            client.set_tag(run_id, Tag.CLOSED, why)
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


def record_missing(study: optuna.Study, recorder: SweepRecorder) -> list[int]:
    """Give each finished trial of the study that MLflow lacks its one child run, from what
    Optuna kept: its state, value, params, reason and figures. The trial numbers added.

    A trial whose run a dead sweep left half-written (created, then closed KILLED by a later
    start: the sweep or its server died between the two writes) gets that run completed,
    not a second one beside it: one child run per measured trial, whatever died when."""
    client = recorder.client
    runs = client.search_runs(
        [recorder.experiment_id],
        filter_string=(
            f"tags.`optuna.study_name` = '{study.study_name}' and "
            f"tags.`{Tag.KIND}` = '{RunKind.TRIAL}'"
        ),
        max_results=50000,
    )
    held = {r.data.tags.get(Tag.TRIAL_NUMBER) for r in runs if Tag.CLOSED not in r.data.tags}
    stubs = {r.data.tags.get(Tag.TRIAL_NUMBER): r.info.run_id for r in runs}  # closed ones
    added = []
    for frozen in study.get_trials(deepcopy=False, states=tuple(MLFLOW_STATUS)):
        attrs = frozen.user_attrs
        if str(frozen.number) in held or attrs.get(TrialAttr.REASON) == OUT_OF_RANGE:
            continue  # recorded, or dropped unrun (never recorded, by design)
        if TrialAttr.REPEAT_OF in attrs:
            continue  # answered from an earlier trial: counted on the parent, not a run
        _complete_run(recorder, study.study_name, frozen, stubs.get(str(frozen.number)))
        added.append(frozen.number)
    return added


def _complete_run(
    recorder: SweepRecorder, study_name: str, frozen: FrozenTrial, run_id: str | None
) -> None:
    """Write trial ``frozen``'s child run from Optuna's record, into ``run_id`` (a run a
    later start closed half-written) or a new run, and end it with the trial's state."""
    client, attrs = recorder.client, frozen.user_attrs
    parent = str(attrs.get(TrialAttr.PARENT_RUN) or recorder.parent_id)
    tags = {**child_tags(parent, study_name, frozen), Tag.RECOVERED: RECOVERED_WHY}
    if attrs.get(TrialAttr.REASON):
        tags[Tag.REASON] = str(attrs[TrialAttr.REASON])
    start = frozen.datetime_start.timestamp() * 1000 if frozen.datetime_start else None
    if run_id is None:
        run_id = client.create_run(recorder.experiment_id, start_time=int(start or 0) or None,
                                   run_name=f"trial {frozen.number}").info.run_id  # fmt: skip
    else:
        client.delete_tag(run_id, Tag.CLOSED)  # completed now: no longer a dead sweep's stub
    figures = TrialFigures.of(attrs)
    values = {k: float(v) for k, v in (figures.as_attrs() if figures else {}).items()}
    if frozen.value is not None:
        values["time_per_sample_ms"] = float(frozen.value)
    logged = client.get_run(run_id).data.params
    client.log_batch(
        run_id,
        metrics=[mlflow_entities.Metric(k, v, int(start or 0), 0) for k, v in values.items()],
        params=[mlflow_entities.Param(k.lstrip("+"), str(v)) for k, v in frozen.params.items()
                if k.lstrip("+") not in logged],
        tags=[mlflow_entities.RunTag(k, v) for k, v in tags.items()],
    )  # fmt: skip
    end = frozen.datetime_complete
    end_ms = int(end.timestamp() * 1000) if end else None
    client.set_terminated(run_id, MLFLOW_STATUS[frozen.state], end_ms)


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
        added = record_missing(study, recorder)
        if added:
            lines.append(
                f"added {len(added)} trial(s) Optuna held but MLflow lacked (its server was "
                f"gone when they ended): {', '.join(map(str, added))}"
            )
    return lines


def close_dead_sweeps(
    recorder: SweepRecorder, study_name: str, note: Callable[[str], None]
) -> None:
    """At a sweep's end, end (KILLED) the MLflow runs of this host's sweeps of the study that
    died while it ran, as the next start would: one killed between two trials left no trial
    RUNNING for this sweep to fail, so nothing else ends its parent run. Only runs whose
    sweep process is gone; MLflow failing here loses nothing (the next start closes them)."""
    if not recorder.enabled or recorder.lost:
        return
    try:
        closed = close_dead_runs(
            recorder.client, recorder.experiment_id, study_name, recorder.parent_id,
            locked=False, why=CLOSED_AT_END_WHY,
        )  # fmt: skip
    except Exception as exc:  # the results are still written
        note(f"could not close the MLflow runs of sweeps that died meanwhile: {exc}")
        return
    if closed:
        note(f"closed {len(closed)} MLflow run(s) of a sweep that died meanwhile")
