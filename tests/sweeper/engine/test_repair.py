"""What a start repairs in MLflow after a dead sweep (``engine/_repair.py``), on real stores.

Whatever moment the sweep (or its tracking server) died at, Optuna and MLflow agree after
the next start: one child run per measured trial. Real SQLite stores for Optuna and MLflow;
the dead sweep's half-written records are written the way the sweep writes them.
"""

from __future__ import annotations

import socket
from pathlib import Path

import optuna
import psutil
import pytest
from optuna.trial import TrialState

from hydra_plugins.loadertune_sweeper._keys import Tag, TrialAttr
from hydra_plugins.loadertune_sweeper.engine._repair import resumed
from hydra_plugins.loadertune_sweeper.record._mlflow_runs import SweepRecorder, child_tags
from hydra_plugins.loadertune_sweeper.study._storage import fail_orphaned_trials
from loadertune.config._typed import TrackingConfig


@pytest.fixture(autouse=True)
def _own_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This test's MLflow store, and no other test's after it: MLflow exports the URI it is
    pointed at into the environment, which the next test would read."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")


def _study(out: Path) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(storage=f"sqlite:///{out / 'optuna.db'}", study_name="s")


def _recorder(out: Path, study: optuna.Study) -> SweepRecorder:
    return SweepRecorder(TrackingConfig(), str(out), study, "sqlite:///x", "TPESampler")


def _children(recorder: SweepRecorder) -> list:  # type: ignore[type-arg]
    runs = recorder.client.search_runs([recorder.experiment_id], max_results=100)
    return [r for r in runs if r.data.tags.get(Tag.KIND) == "trial"]


def _dead_pid() -> int:
    pid = 2**22 - 1
    while psutil.pid_exists(pid):
        pid -= 1
    return pid


def test_a_run_half_written_when_the_sweep_died_is_completed_not_copied(tmp_path: Path) -> None:
    """The sweep told Optuna, created the child run, and died before ending it (killed, or
    its tracking server gone between the two writes)."""
    study = _study(tmp_path)
    dead = _recorder(tmp_path, study)
    trial = study.ask({"loader.num_workers": optuna.distributions.IntDistribution(0, 4)})
    trial.set_user_attr(TrialAttr.PARENT_RUN, str(dead.parent_id))
    frozen = study.tell(trial, 1.25)
    stub = dead.client.create_run(
        dead.experiment_id, tags=child_tags(str(dead.parent_id), "s", frozen)
    ).info.run_id

    again = _recorder(tmp_path, study)
    lines = resumed(study, [], again, locked=True)

    children = _children(again)
    assert [c.info.run_id for c in children] == [stub], lines
    run = again.client.get_run(stub)
    assert run.info.status == "FINISHED"
    assert run.data.metrics["time_per_sample_ms"] == 1.25
    assert run.data.params["loader.num_workers"] == str(frozen.params["loader.num_workers"])
    assert Tag.RECOVERED in run.data.tags and Tag.CLOSED not in run.data.tags
    assert run.data.tags[Tag.TRIAL_STATE] == "COMPLETE"
    assert again.client.get_run(str(dead.parent_id)).info.status == "KILLED"
    assert any("added 1 trial" in line for line in lines)


def test_a_trial_orphaned_by_a_killed_sweep_has_one_run_after_the_rerun(tmp_path: Path) -> None:
    """A sweep killed mid-trial: the next start fails the trial and records it once, under
    the study's name, so the repair that follows finds it and adds no copy."""
    study = _study(tmp_path)
    dead = _recorder(tmp_path, study)
    done = study.ask({"loader.num_workers": optuna.distributions.IntDistribution(0, 4)})
    done.set_user_attr(TrialAttr.PARENT_RUN, str(dead.parent_id))
    dead.record_trial(study.tell(done, 2.0), None, None, [], "", {})
    cut = study.ask({"loader.num_workers": optuna.distributions.IntDistribution(0, 4)})
    cut.set_user_attr(TrialAttr.PARENT_RUN, str(dead.parent_id))
    cut.set_user_attr(TrialAttr.OWNER_HOST, socket.gethostname())
    cut.set_user_attr(TrialAttr.OWNER_PID, _dead_pid())

    orphans = fail_orphaned_trials(study)
    assert orphans == [cut.number]
    again = _recorder(tmp_path, study)
    again.record_orphans(study, orphans)  # the start's order: orphans, then the repair
    lines = resumed(study, [], again, locked=True)

    numbers = sorted(int(c.data.tags[Tag.TRIAL_NUMBER]) for c in _children(again))
    assert numbers == [done.number, cut.number], lines
    assert not any("Optuna held but MLflow lacked" in line for line in lines)
    states = {t.number: t.state for t in study.trials}
    assert states == {done.number: TrialState.COMPLETE, cut.number: TrialState.FAIL}
    orphan = next(c for c in _children(again) if c.data.tags[Tag.TRIAL_NUMBER] == str(cut.number))
    assert orphan.data.tags[Tag.STUDY_NAME] == "s"
    assert orphan.info.status == "FAILED" and orphan.data.tags[Tag.REASON] == "interrupted"


def test_a_repeat_cut_before_its_tell_gets_no_run(tmp_path: Path) -> None:
    """A sweep killed while it answered a trial from an earlier one (``repeat_of`` set, the
    earlier reports copied, not yet told): the trial is failed as interrupted, and like every
    repeat it has no child run, so MLflow's runs are still the measured trials."""
    study = _study(tmp_path)
    dead = _recorder(tmp_path, study)
    space = {"loader.num_workers": optuna.distributions.IntDistribution(0, 4)}
    done = study.ask(space)
    done.set_user_attr(TrialAttr.PARENT_RUN, str(dead.parent_id))
    dead.record_trial(study.tell(done, 2.0), None, None, [], "", {})
    cut = study.ask(space)
    for key, value in ((TrialAttr.PARENT_RUN, str(dead.parent_id)),
                       (TrialAttr.OWNER_HOST, socket.gethostname()),
                       (TrialAttr.OWNER_PID, _dead_pid()),
                       (TrialAttr.REPEAT_OF, done.number)):  # fmt: skip
        cut.set_user_attr(key, value)
    cut.report(2.0, 1)

    orphans = fail_orphaned_trials(study)
    assert orphans == [cut.number]
    again = _recorder(tmp_path, study)
    again.record_orphans(study, orphans)
    lines = resumed(study, [], again, locked=True)

    numbers = [int(c.data.tags[Tag.TRIAL_NUMBER]) for c in _children(again)]
    assert numbers == [done.number], lines
    assert study.trials[cut.number].state == TrialState.FAIL
