"""``loadertune`` and ``loadertune -m`` with ``trial.nproc_per_node=2``, in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from optuna.trial import TrialState

from loadertune.errors import ExitStatus
from tests._cli import run_cli, trial_status
from tests._processes import zombie
from tests._sweeps import NAMED, Swept, finished, mlflow_runs, study_at, sweep
from tests.conftest import ROOT, with_tiny

pytestmark = pytest.mark.slow

# ``++``: the key is set whether or not the YAML of the trial group lists it.
TWO = "++trial.nproc_per_node=2"


def _rank_metrics_recorded(run: object) -> None:
    data = run.data  # type: ignore[attr-defined]
    assert data.params["trial.nproc_per_node"] == "2"
    for k in (0, 1):
        assert data.metrics[f"rank{k}.time_per_sample_ms"] > 0
        assert 0.0 <= data.metrics[f"rank{k}.data_wait_fraction"] <= 1.0
    assert data.metrics["time_per_sample_ms"] > 0
    assert "Slowest of 2 ranks: rank" in data.tags["bottleneck.why"]
    assert data.tags["machine.rank_torch_threads"] == "1"  # torchrun's OMP_NUM_THREADS=1


def test_a_single_two_rank_trial_is_recorded_with_each_rank(tmp_path: Path) -> None:
    overrides = ["model=simulated", "model.step_ms=2", "loader.num_workers=1", TWO]
    proc = run_cli(tmp_path, f"paths.output_root={tmp_path}", *with_tiny(overrides))
    assert proc.returncode == 0, proc.stderr
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("loadertune")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    _rank_metrics_recorded(run)


@pytest.fixture(scope="module")
def two_rank_sweep(tmp_path_factory: pytest.TempPathFactory) -> Swept:
    """Two settings (0 and 1 workers) of two ranks each, then a verdict of two rounds."""
    out = tmp_path_factory.mktemp("two_rank_sweep")
    proc = sweep(
        out,
        *NAMED,
        TWO,
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.params.loader.num_workers=int(interval(0,1))",
        "hydra.sweeper.verdict_repeats=2",
        verdict=True,
    )
    return Swept(out, proc)


def test_a_two_rank_sweep_records_each_rank_of_every_trial(two_rank_sweep: Swept) -> None:
    tmp_path, proc = two_rank_sweep.out, two_rank_sweep.proc
    assert proc.returncode == 0, proc.stderr
    trials = finished(tmp_path)  # enqueued baselines may still be waiting
    assert len(trials) == 2
    assert all(t.state == TrialState.COMPLETE for t in trials)
    _, children, _ = mlflow_runs(tmp_path)
    assert len(children) == 2
    for child in children:
        _rank_metrics_recorded(child)
    by_number = {int(c.data.tags["optuna.trial_number"]): c for c in children}
    for t in trials:
        value = by_number[t.number].data.metrics["time_per_sample_ms"]
        assert value == pytest.approx(t.value)


def test_torchrun_trains_on_settings_tuned_for_two_ranks(tmp_path: Path) -> None:
    group = tmp_path / "outputs" / "conf" / "loader"
    group.mkdir(parents=True)
    (group / "best.yaml").write_text(
        "# tuned for 2 ranks\nbatch_size: 4\nnum_workers: 1\nshuffle: true\nnproc_per_node: 2\n"
    )
    overrides = [o for o in with_tiny(["model=simulated", "model.step_ms=2"]) if "loader." not in o]
    proc = run_cli(
        tmp_path,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node=2",
        f"--log-dir={tmp_path / 'torchrun'}",  # not a torchelastic_* folder left in /tmp
        str(ROOT / "scripts" / "train.py"),
        "loader=best",
        f"paths.output_root={tmp_path / 'outputs'}",
        "+train.epochs=2",
        *overrides,
        command=[sys.executable],
    )
    assert proc.returncode == 0, proc.stderr
    # 48 images over 2 ranks, batches of 4: each rank trains 24 an epoch; rank 0 reports.
    assert proc.stdout.count("epoch 1: 24 samples") == 1, proc.stdout
    assert "tuned for" not in proc.stderr  # the world it was tuned for
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("loadertune-train")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])  # rank 0's only
    assert run.data.params["loader.num_workers"] == "1"


def test_the_export_of_a_two_rank_sweep_says_it_is_per_rank(two_rank_sweep: Swept) -> None:
    tmp_path, proc = two_rank_sweep.out, two_rank_sweep.proc
    assert proc.returncode == 0, proc.stderr
    (verdict,) = (tmp_path / "multirun").glob("*/*/verdict.md")
    assert "Per rank: num_workers=" in verdict.read_text()
    assert "worker processes on the node" in verdict.read_text()
    (exported,) = (tmp_path / "multirun").glob("*/*/best_loader.yaml")
    text = exported.read_text()
    assert "nproc_per_node: 2" in text
    assert "Tuned for 2 ranks per node" in text
    from omegaconf import OmegaConf

    from loadertune.loader._build import loader_config, tuned_for

    node = OmegaConf.load(exported)
    assert tuned_for(node) == 2
    assert loader_config(node).num_workers in (0, 1)


def _killing(marks: Path, up: int) -> list[str]:
    """Two ranks, a DataLoader worker each, whose rank 1 SIGKILLs the process ``up`` levels
    above it at its third step, once both ranks wrote their pids and their children's."""
    marks.mkdir()
    return [
        "model=custom",
        "model._target_=rank_faults.killing_step",
        f"+model.folder={marks}",
        f"+model.up={up}",
        "loader.num_workers=1",
        "trial.steps=20",
        TWO,
    ]


def _left_running(marks: Path) -> list[int]:
    """The ranks and their children (workers, rank 0's sampler) still running 60 s after the
    kill at the most (a zombie has ended; this container's init may never reap it)."""
    pids = []
    for mark in marks.glob("rank-*.json"):
        seen = json.loads(mark.read_text())
        pids += [seen["pid"], *seen["children"]]
    assert len(pids) >= 5, pids  # 2 ranks, 2 workers, a sampler
    deadline = time.monotonic() + 60.0
    alive = pids
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if psutil.pid_exists(p) and not zombie(p)]
    for pid in alive:  # not to leave them to the next test, before failing
        os.kill(pid, signal.SIGKILL)
    return alive


@pytest.fixture
def short_temp() -> Iterator[Path]:
    """A temporary folder for the ranks' ``TMPDIR`` with a short path: torch's launcher makes
    a Unix socket under it, whose path may not pass 107 bytes, and pytest's own ``tmp_path``
    grows with its run count (``/tmp/pytest-of-root/pytest-118/popen-gw1/test_the_ranks_...``)."""
    folder = Path(tempfile.mkdtemp(prefix="lt-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _rank_folders(temp: Path) -> list[str]:
    return sorted(p.name for p in temp.glob("loadertune-ranks-*"))


def test_the_ranks_of_a_killed_single_trial_die_with_it(
    tmp_path: Path, short_temp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kill -9 of ``loadertune trial.nproc_per_node=2`` (the ranks' parent): its pipes end
    (``_loadertune`` reads them to the end), no rank or worker runs on, and the next trial's
    start removes the launcher's folder it left."""
    temp = short_temp
    monkeypatch.setenv("TMPDIR", str(temp))
    marks = tmp_path / "marks"
    status, err = trial_status(tmp_path, *with_tiny(_killing(marks, up=1)))
    assert status == -signal.SIGKILL, err
    assert _left_running(marks) == []
    killed = int((marks / "killed").read_text())
    (left,) = _rank_folders(temp)
    assert left.startswith(f"loadertune-ranks-{killed}-")  # nobody survived to remove it
    from loadertune.storage import ranks_folder

    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    with ranks_folder() as mine:  # what the next trial of several ranks starts with
        assert _rank_folders(temp) == [mine.name]
    assert _rank_folders(temp) == []


def test_the_ranks_of_a_killed_sweep_die_with_it(
    tmp_path: Path, short_temp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kill -9 of ``loadertune -m`` while a 2-rank trial runs: the sweep's pipes end (``sweep``
    reads them to the end, as ``| tee`` does), no trial process, rank or worker runs on."""
    temp = short_temp
    monkeypatch.setenv("TMPDIR", str(temp))
    marks = tmp_path / "marks"
    proc = sweep(tmp_path, "hydra.sweeper.study_name=s", *_killing(marks, up=2))
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert _left_running(marks) == []
    from loadertune.storage import remove_stale_scratch

    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    assert len(_rank_folders(temp)) == 1
    remove_stale_scratch()  # what the next sweep does after its first trial
    assert _rank_folders(temp) == []


def test_a_killed_two_rank_trial_process_is_recorded_killed_and_leaves_no_folder(
    tmp_path: Path, short_temp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trial process SIGKILLed under its ranks is ``trial_killed``, as with one rank (not
    a hang its ranks kept the pipe open for), and the sweep removes the launcher's folder."""
    temp = short_temp
    monkeypatch.setenv("TMPDIR", str(temp))
    marks = tmp_path / "marks"
    proc = sweep(
        tmp_path, "hydra.sweeper.study_name=s", "hydra.sweeper.n_trials=1", *_killing(marks, 1)
    )
    assert proc.returncode == ExitStatus.NO_RESULT, proc.stderr
    assert _left_running(marks) == []
    (trial,) = study_at(tmp_path).trials
    assert (trial.state, trial.user_attrs.get("reason")) == (TrialState.FAIL, "trial_killed")
    _, (child,), _ = mlflow_runs(tmp_path)
    assert (child.info.status, child.data.tags.get("reason")) == ("FAILED", "trial_killed")
    assert _rank_folders(temp) == []


def test_a_dataset_bug_on_one_rank_stops_the_sweep_as_one_bug(tmp_path: Path) -> None:
    """Rank 1's dataset raises, in the rank itself without workers and in its worker with one:
    the same bug, as with one rank (the rank's traceback ends where it raised), so the sweep
    stops after two trials with status 4 instead of failing every trial."""
    proc = sweep(
        tmp_path,
        "hydra.sweeper.study_name=s",
        "dataset=custom",
        "dataset._target_=faulty_data.Faulty",
        "+dataset.mode=raise_on_rank1",
        "model=simulated",
        "model.step_ms=1",
        "loader.batch_size=4",
        TWO,
        "hydra.sweeper.n_trials=4",
        "hydra.sweeper.params.loader.num_workers=int(interval(0,1))",
    )
    assert proc.returncode == ExitStatus.DATASET_BUG, proc.stderr
    trials = finished(tmp_path)
    assert len(trials) == 2
    assert {t.params["loader.num_workers"] for t in trials} == {0, 1}
    assert all(t.state == TrialState.FAIL for t in trials)
    assert "faulty_data.py" in proc.stdout + proc.stderr  # the place, in the user's code
