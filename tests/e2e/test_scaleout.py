"""Scale-out: one study shared by several sweeps on PostgreSQL, an MLflow server, SLURM.

Three tiers, as elsewhere: tables and in-process checks of machine identity, budgets and the
hand-out of trials (SQLite, no server); the shipped SLURM launcher config turned into the
``sbatch`` script submitit would submit; and ``loadertune -m`` processes in subprocesses
against a real PostgreSQL server and a real ``mlflow server`` on PostgreSQL, both on loopback.

The server tests use ``LOADERTUNE_TEST_PG`` (an admin URL that may create databases), or the
server ``scripts/ci_postgres.sh`` sets up, starting it when it is installed but down. Where
none can be had they skip and say what to run; under ``CI=true`` they fail instead, so CI
cannot pass without running them.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pytest
from omegaconf import OmegaConf
from optuna.trial import TrialState

from hydra_plugins.loadertune_sweeper._keys import StudyAttr, TrialAttr
from hydra_plugins.loadertune_sweeper.launch import _fanout
from hydra_plugins.loadertune_sweeper.study import _hosts, _storage
from loadertune.errors import ConfigError
from tests._cli import start_cli, sweep_args
from tests._mlflow_server import mlflow_server as running_mlflow_server
from tests.conftest import CONF, ROOT

optuna.logging.set_verbosity(optuna.logging.WARNING)

PG_DEFAULT = "postgresql://loadertune:loadertune@127.0.0.1:5432/postgres"
RUN_PG = "bash scripts/ci_postgres.sh"


# ---- machine identity ---------------------------------------------------------------------


def _print(**changes: Any) -> _hosts.Fingerprint:
    base = {
        "cpu_model": "Xeon 8480",
        "cpus": 224,
        "usable_cpus": 224,
        "memory_gib": 2015,
        "gpu": "8 x NVIDIA H200",
        "torch": "2.13.0+cu128",
    }
    return _hosts.Fingerprint(**{**base, **changes})


def test_fingerprint_of_this_host_names_its_class() -> None:
    mine = _hosts.fingerprint()
    assert mine.cpus >= mine.usable_cpus >= 1
    assert mine.memory_gib >= 1
    assert mine.torch.startswith("2.")
    assert mine.machine_class.startswith(f"{mine.usable_cpus}cpu-{mine.memory_gib}g-")
    assert mine.machine_class.endswith(mine.digest)
    assert _print().machine_class == f"224cpu-2015g-8xh200-{_print().digest}"
    assert _print(gpu="none").machine_class.startswith("224cpu-2015g-nogpu-")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"cpu_model": "EPYC 9654"}, "cpu_model"),
        ({"usable_cpus": 112}, "usable_cpus"),
        ({"memory_gib": 1007}, "memory_gib"),
        ({"gpu": "8 x NVIDIA A100-SXM4-80GB"}, "gpu"),
        ({"torch": "2.12.0+cu126"}, "torch"),
    ],
)
def test_any_difference_changes_the_class_and_is_named(change: dict[str, Any], field: str) -> None:
    other = _print(**change)
    assert other.digest != _print().digest
    (diff,) = _hosts.differences(_print().as_dict(), other.as_dict())
    assert diff.startswith(field)


def test_first_host_stamps_the_study_and_a_different_one_is_refused() -> None:
    study = optuna.create_study(study_name="s")
    assert _hosts.admit(study, _print()) is None
    assert study.user_attrs[StudyAttr.FINGERPRINT] == _print().as_dict()
    assert _hosts.admit(study, _print()) is None  # the same class joins quietly
    with pytest.raises(ConfigError) as refused:
        _hosts.admit(study, _print(gpu="8 x NVIDIA A100-SXM4-80GB"))
    line = str(refused.value)
    assert "\n" not in line
    assert line.startswith("hydra.sweeper.force_fingerprint=false: study s was measured on ")
    assert "gpu '8 x NVIDIA H200' here '8 x NVIDIA A100-SXM4-80GB'" in line
    assert "Fix:" in line and "force_fingerprint=true" in line
    forced = _hosts.admit(study, _print(torch="2.12.0"), force=True)
    assert forced is not None and "torch" in forced
    assert study.user_attrs[StudyAttr.FINGERPRINT] == _print().as_dict()  # unchanged


def test_default_study_name_is_per_machine_class_not_per_host() -> None:
    choices = {"dataset": "synthetic_images", "storage": "local", "model": "simulated"}
    name = _storage.default_study_name(choices, {"trial": {"steps": 4}})
    assert name.startswith(
        f"synthetic_images-local-simulated@{_hosts.fingerprint().machine_class}-"
    )
    assert socket.gethostname() not in name.split("@")[1]


def test_every_claimed_trial_records_host_and_fingerprint() -> None:
    study = optuna.create_study()
    trial = study.ask()
    _storage.claim(trial)
    attrs = study.trials[0].user_attrs
    assert attrs[TrialAttr.OWNER_HOST] == socket.gethostname()
    assert attrs[TrialAttr.OWNER_PID] == os.getpid()
    mine = _hosts.fingerprint()
    assert attrs[TrialAttr.MACHINE] == {"class": mine.machine_class, **mine.as_dict()}
    tags = _hosts.run_tags(attrs)
    assert tags == {
        "machine.class": _hosts.fingerprint().machine_class,
        "machine.sweep_host": socket.gethostname(),
    }


# ---- budgets and the hand-out of trials ----------------------------------------------------


def _study_with(states: list[TrialState], reasons: dict[int, str] | None = None) -> optuna.Study:
    study = optuna.create_study()
    for number, state in enumerate(states):
        trial = study.ask()
        if number in (reasons or {}):
            trial.set_user_attr(TrialAttr.REASON, (reasons or {})[number])
        if state != TrialState.RUNNING:
            study.tell(trial, 1.0 if state == TrialState.COMPLETE else None, state=state)
    return study


C, P, F, R = TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL, TrialState.RUNNING


@pytest.mark.parametrize(
    ("states", "reasons", "args", "expected"),
    [
        # count_trials=invocation: n_trials is what this command runs (the official meaning).
        ([C, C], {}, (5, None, "invocation"), (5, None, 5)),
        ([C, C], {}, (5, 4, "invocation"), (2, 4, 2)),
        ([C, C, R], {}, (5, 4, "invocation"), (1, 4, 1)),  # another host's trial takes a place
        # count_trials=study: n_trials is the total of the whole study, over every host.
        ([], {}, (6, None, "study"), (None, 6, 6)),
        ([C, P, F, R], {2: "worker_crashed"}, (6, None, "study"), (None, 6, 2)),
        ([C, F, F], {1: "interrupted", 2: "over_budget"}, (6, None, "study"), (None, 6, 5)),
        ([C, C], {}, (6, 4, "study"), (None, 4, 2)),  # max_trials_total still caps
        ([C, C, C], {}, (2, None, "study"), (None, 2, 0)),
    ],
)
def test_budget(
    states: list[TrialState],
    reasons: dict[int, str],
    args: tuple[int, int | None, str],
    expected: tuple[int | None, int | None, int],
) -> None:
    budget = _storage.Budget.of(*args, _study_with(states, reasons))
    assert (budget.runs, budget.total, budget.shown) == expected


def test_slots_hand_out_exactly_the_total() -> None:
    study = optuna.create_study()
    slots = _storage.Slots(study, total=3, poll_s=0.01)
    for _ in range(3):
        trial = slots.next()
        assert trial is not None
        study.tell(trial, 1.0)
    assert slots.next() is None
    assert len(study.trials) == 3


def test_a_trial_asked_after_the_last_place_went_is_given_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two hosts see one free place at the same moment: the higher trial number yields."""
    study = _study_with([C, C, R])  # trial 2 runs on "another host"
    optuna.trial.Trial(study, study.trials[2]._trial_id).set_user_attr(
        TrialAttr.OWNER_HOST, "node-elsewhere"
    )
    real = _storage.tally
    first = iter([(2, 0)])  # what this host saw before the other host's ask landed
    monkeypatch.setattr(_storage, "tally", lambda s: next(first, None) or real(s))
    notes: list[str] = []
    calls = itertools.count()
    slots = _storage.Slots(
        study, total=3, stopped=lambda: next(calls) > 3, note=notes.append, poll_s=0.01
    )
    assert slots.next() is None
    given_back = study.trials[3]
    assert given_back.state == TrialState.FAIL
    assert given_back.user_attrs[TrialAttr.REASON] == _storage.OVER_BUDGET
    assert given_back.params == {}
    assert not _storage.counts(given_back)
    assert notes and "waiting for 1 trial still running elsewhere" in notes[0]


def test_a_place_freed_by_a_dead_sweep_is_taken_again(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(storage=storage)
    study.tell(study.ask(), 1.0)
    dead = study.ask()
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead.set_user_attr(TrialAttr.OWNER_HOST, socket.gethostname())
    dead.set_user_attr(TrialAttr.OWNER_PID, int(gone.stdout))
    lost: list[list[int]] = []
    slots = _storage.Slots(study, total=2, on_lost=lost.append, poll_s=0.01)
    trial = slots.next()
    assert trial is not None and trial.number == 2
    assert lost == [[1]]
    assert study.trials[1].state == TrialState.FAIL
    assert study.trials[1].user_attrs[TrialAttr.REASON] == _storage.INTERRUPTED


def test_a_trial_being_claimed_is_not_taken_for_an_orphan() -> None:
    """Another sweep may look between ``ask`` and the last write of ``claim``."""
    study = optuna.create_study()
    fresh, half = study.ask(), study.ask()
    half.set_user_attr(TrialAttr.OWNER_HOST, socket.gethostname())  # pid not written yet
    assert _storage.fail_orphaned_trials(study) == []
    assert {t.state for t in study.trials} == {TrialState.RUNNING}
    assert fresh.number == 0


# ---- fan-out settings and the SLURM launcher config ----------------------------------------

BASIC = _fanout.BASIC
LOCAL = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher"
SLURM = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
PG = "postgresql://u:p@db/optuna"


def _settings(**changes: Any) -> Any:
    base = {
        "count_trials": "study",
        "workers": 4,
        "n_trials": 40,
        "allow_parallel_trials": False,
        "storage": PG,
    }
    return SimpleNamespace(**{**base, **changes})


def _config(target: str, tracking: str | None = "http://mlflow:5000") -> Any:
    return OmegaConf.create(
        {
            "hydra": {"launcher": {"_target_": target}},
            "tracking": {"enabled": True, "tracking_uri": tracking},
        }
    )


@pytest.mark.parametrize(
    ("settings", "target", "tracking", "key", "says"),
    [
        ({"count_trials": "hosts"}, SLURM, "http://m", "count_trials", "not invocation or study"),
        ({"workers": 0}, SLURM, "http://m", "workers", "must be an integer >= 1"),
        ({"count_trials": "invocation"}, SLURM, "http://m", "workers", "count_trials=study"),
        ({}, BASIC, "http://m", "workers", "one after another"),
        ({}, LOCAL, "http://m", "workers", "allow_parallel_trials=true"),
        ({"storage": None}, SLURM, "http://m", "storage", "SQLite"),
        ({"storage": "sqlite:////nfs/o.db"}, SLURM, "http://m", "storage", "SQLite"),
        ({}, SLURM, "sqlite:////nfs/mlflow.db", "tracking.tracking_uri", "MLflow SQLite"),
    ],
)
def test_fan_out_refuses_what_cannot_work(
    settings: dict[str, Any], target: str, tracking: str, key: str, says: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        _fanout.check_scale_out(_settings(**settings), _config(target, tracking))
    assert refused.value.key.endswith(key)
    assert says in str(refused.value)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("settings", "target"),
    [
        ({}, SLURM),
        ({"workers": 1, "count_trials": "invocation", "storage": None}, SLURM),
        ({"allow_parallel_trials": True, "storage": None}, LOCAL),
        ({"workers": 1, "count_trials": "invocation", "storage": None}, BASIC),
    ],
)
def test_fan_out_accepts(settings: dict[str, Any], target: str) -> None:
    _fanout.check_scale_out(_settings(**settings), _config(target))
    assert _fanout.wanted(_settings(**settings), _config(target)) == (target != BASIC)


def _worker_return(k: int, storage: str, loader: dict[str, Any] | None) -> Any:
    """What a fan-out worker hands back (Hydra's own JobReturn), its verdict picking ``loader``."""
    from hydra.core.utils import JobReturn, JobStatus

    block = None if loader is None else {"trial_number": k, "loader": loader, "confidence": "high"}
    info = {"host": f"node{k}", "pid": k, "study_name": "s", "storage": storage, "trials": 2}
    ret = JobReturn(status=JobStatus.COMPLETED)
    ret.return_value = {**info, "recommended": block}
    return ret


@pytest.mark.parametrize(
    ("loaders", "joint", "said"),
    [
        ([{"num_workers": 2}, {"num_workers": 2}], {"num_workers": 2}, "2 worker verdict(s) alike"),
        ([{"num_workers": 2}, {"num_workers": 4}], None, "the workers' verdicts differ"),
        ([None, None], None, "no verdict ran"),
    ],
)
def test_the_join_recommends_only_what_every_worker_verdict_chose(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    loaders: list[dict[str, Any] | None],
    joint: dict[str, Any] | None,
    said: str,
) -> None:
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(storage=storage, study_name="s")
    study.add_trial(
        optuna.create_trial(
            params={"x": 1},
            distributions={"x": optuna.distributions.IntDistribution(0, 2)},
            value=3.0,
        )
    )
    returns = [_worker_return(k, storage, loader) for k, loader in enumerate(loaders)]
    _fanout.summarise(returns, tmp_path)
    results = OmegaConf.to_container(OmegaConf.load(tmp_path / "optimization_results.yaml"))
    assert isinstance(results, dict)
    assert results["best_value"] == 3.0
    if joint is None:
        assert results["recommended"] is None
    else:
        assert results["recommended"]["loader"] == joint
        assert results["recommended"]["agreed_by"] == ["worker0", "worker1"]
    by_worker = results.get("recommended_by_worker", {})
    assert [b["loader"] for b in by_worker.values()] == [x for x in loaders if x is not None]
    assert said in capsys.readouterr().out


def test_slurm_launcher_config_asks_for_whole_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shipped ``hydra/launcher=loadertune_slurm``, as the sbatch script submitit writes."""
    import hydra_plugins.hydra_submitit_launcher  # noqa: F401  (a dev dependency: no skip)
    import submitit
    from hydra import compose, initialize_config_dir
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text("#!/bin/sh\nexit 0\n")
    (fake / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=["hydra/launcher=loadertune_slurm", "hydra.launcher.partition=gpu8"],
            return_hydra_config=True,
        )
    # As BaseSubmititLauncher.launch builds the executor.
    params = OmegaConf.to_container(cfg.hydra.launcher, resolve=False)
    assert isinstance(params, dict)
    assert params.pop("_target_") == SLURM
    for key in ("submitit_folder", "max_num_timeout"):
        params.pop(key)
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    executor = submitit.AutoExecutor(cluster="slurm", folder=str(tmp_path / "jobs"))
    executor.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items()})
    script = executor._executor._make_submission_file_text("python -m sweep", "uid")
    for line in (
        "#SBATCH --exclusive",
        "#SBATCH --mem=0",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --partition=gpu8",
    ):
        assert line in script.splitlines()


# ---- real servers: PostgreSQL and an MLflow tracking server on loopback -------------------


def _connect(url: str) -> Any:
    import psycopg

    return psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), connect_timeout=3)


def _unavailable(reason: str) -> None:
    text = (
        f"no PostgreSQL server for the scale-out tests ({reason}). Run `{RUN_PG}` as root "
        "(installs Debian's postgresql and starts it on 127.0.0.1:5432), or set "
        "LOADERTUNE_TEST_PG=postgresql://user:password@127.0.0.1:5432/postgres"
    )
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the scale-out tests: {text}")
    pytest.skip(text)


@pytest.fixture(scope="module")
def pg_admin() -> str:
    """An admin URL of a PostgreSQL server on loopback that may create databases."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("psycopg is not installed: pip install 'psycopg[binary]'")
    url = os.environ.get("LOADERTUNE_TEST_PG", PG_DEFAULT)
    try:
        _connect(url).close()
        return url
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if os.geteuid() == 0 and shutil.which("bash") and "LOADERTUNE_TEST_PG" not in os.environ:
        started = subprocess.run(
            ["bash", "scripts/ci_postgres.sh", "--no-install"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if started.returncode == 0:
            with contextlib.suppress(Exception):
                _connect(url).close()
                return url
    _unavailable(first)
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def pg_database(pg_admin: str) -> Iterator[Callable[[str], str]]:
    """Creates fresh databases (dropped afterwards) and returns their URLs."""
    made: list[str] = []

    def make(purpose: str) -> str:
        name = f"lt_{purpose}_{os.getpid()}_{len(made)}"
        with _connect(pg_admin) as conn:
            conn.autocommit = True
            conn.execute(f"DROP DATABASE IF EXISTS {name}")
            conn.execute(f"CREATE DATABASE {name}")
        made.append(name)
        return pg_admin.rsplit("/", 1)[0] + "/" + name

    yield make
    with contextlib.suppress(Exception), _connect(pg_admin) as conn:
        conn.autocommit = True
        for name in made:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="module")
def mlflow_server(
    pg_database: Callable[[str], str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A real ``mlflow server`` on a fresh PostgreSQL database, on a free loopback port."""
    root = tmp_path_factory.mktemp("mlflow-server")
    with running_mlflow_server(pg_database("mlflow"), root / "artifacts", root) as uri:
        yield uri


def test_heartbeats_let_any_host_fail_a_dead_hosts_trial(
    pg_database: Callable[[str], str], disposed: Callable[[Any], Any]
) -> None:
    storage = pg_database("beat")
    sampler, pruner = optuna.samplers.RandomSampler(), optuna.pruners.NopPruner()
    study = disposed(
        _storage.open_study(storage, "s", "minimize", sampler, pruner, heartbeat_s=1, grace_s=1)
    )
    with warnings.catch_warnings():  # "Heartbeat ... supposed to be used with optimize"
        warnings.simplefilter("ignore", UserWarning)
        silent, beating = study.ask(), study.ask()
    for trial in (silent, beating):  # owned by other hosts: no pid to check from here
        trial.set_user_attr(TrialAttr.OWNER_HOST, "node-elsewhere")
        study._storage.record_heartbeat(trial._trial_id)  # type: ignore[attr-defined]
    time.sleep(2.5)
    study._storage.record_heartbeat(beating._trial_id)  # type: ignore[attr-defined]
    assert _storage.fail_orphaned_trials(study) == [silent.number]
    frozen = study.trials[silent.number]
    assert frozen.state == TrialState.FAIL
    assert frozen.user_attrs[TrialAttr.REASON] == _storage.INTERRUPTED
    assert study.trials[beating.number].state == TrialState.RUNNING


@pytest.fixture
def disposed() -> Iterator[Callable[[Any], Any]]:
    """Hands back each study or storage it is given, and closes its database connections when
    the test ends, passed or failed: psycopg warns about a connection left open when it is
    collected, and that warning fails whichever test is running then."""
    held: list[Any] = []

    def hold(study_or_storage: Any) -> Any:
        held.append(study_or_storage)
        return study_or_storage

    yield hold
    for item in held:
        storage = getattr(item, "_storage", item)
        with contextlib.suppress(AttributeError):
            getattr(storage, "_backend", storage).engine.dispose()


def sweep_process(out: Path, *overrides: str) -> subprocess.Popen[str]:
    """Start ``loadertune -m`` (tiny sizes) writing under ``out``; a stand-in for one host."""
    out.mkdir(parents=True, exist_ok=True)
    return start_cli(out, *sweep_args(out, *overrides))


PARALLEL = "hydra.sweeper.allow_parallel_trials=true"


def shared(storage: str, tracking: str, n_trials: int, experiment: str) -> list[str]:
    """One study on the server, counted across hosts, in an MLflow experiment of its own;
    trials long enough to kill mid-way."""
    return [
        "model=simulated",
        "model.step_ms=25",
        "trial.steps=20",
        f"hydra.sweeper.storage={storage}",
        "hydra.sweeper.study_name=shared",
        "hydra.sweeper.count_trials=study",
        f"hydra.sweeper.n_trials={n_trials}",
        "hydra.sweeper.verdict_repeats=0",
        "hydra.sweeper.pruner=none",
        "hydra.sweeper.sampler=random",
        "hydra.sweeper.params.loader.num_workers=int(interval(0,2))",
        f"tracking.tracking_uri={tracking}",
        f"tracking.experiment={experiment}",
    ]


def wait_for(check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.1)


def _measuring(storage: optuna.storages.BaseStorage, pid: int) -> bool:
    """``pid`` owns a running trial that has reported steps, after one finished trial."""
    try:
        trials = optuna.load_study(study_name="shared", storage=storage).trials
    except KeyError:  # not created yet
        return False
    mine = [t for t in trials if t.user_attrs.get(TrialAttr.OWNER_PID) == pid]
    done = any(t.state == TrialState.COMPLETE for t in mine)
    return done and any(t.state == TrialState.RUNNING and t.intermediate_values for t in mine)


def _agree(
    study: optuna.Study, tracking: str, experiment_name: str
) -> tuple[list[Any], dict[int, Any]]:
    """Every measured trial of the study has exactly one MLflow child run, and they agree; a
    trial answered from an earlier one (``repeat_of``) has none, and is counted on its
    sweep's parent run instead (``repeats_answered``)."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking)
    experiment = client.get_experiment_by_name(experiment_name)
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("loadertune.kind") == "sweep"]
    children = [r for r in runs if r.data.tags.get("loadertune.kind") == "trial"]
    numbers = [int(c.data.tags["optuna.trial_number"]) for c in children]
    assert len(numbers) == len(set(numbers)), "a trial was recorded twice"
    recorded = [
        t
        for t in study.trials
        if t.state != TrialState.WAITING
        and t.user_attrs.get(TrialAttr.REASON) != _storage.OVER_BUDGET
        and TrialAttr.REPEAT_OF not in t.user_attrs
    ]
    differ = set(numbers) ^ {t.number for t in recorded}
    assert sorted(numbers) == [t.number for t in recorded], [
        (t.number, t.state.name, {k: v for k, v in t.user_attrs.items() if k != TrialAttr.ERROR})
        for t in study.trials
        if t.number in differ
    ]
    repeats = [t for t in study.trials if TrialAttr.REPEAT_OF in t.user_attrs]
    counted = sum(p.data.metrics.get("repeats_answered", 0) for p in parents)
    assert counted <= len(repeats)  # a killed sweep may die between Optuna's record and MLflow's
    by_number = {int(c.data.tags["optuna.trial_number"]): c for c in children}
    for t in recorded:
        child = by_number[t.number]
        assert child.data.tags["optuna.state"] == t.state.name
        assert child.data.tags["mlflow.parentRunId"] == t.user_attrs["mlflow_parent_run_id"]
        assert child.info.status == {C: "FINISHED", P: "KILLED", F: "FAILED"}[t.state]
        if t.state == C:
            assert child.data.metrics["time_per_sample_ms"] == pytest.approx(t.value)
    assert all(r.info.status != "RUNNING" for r in runs)
    assert {p.data.tags["optuna.study_name"] for p in parents} == {study.study_name}
    return parents, by_number


@pytest.mark.slow
def test_two_sweeps_share_a_study_and_one_survives_the_other(
    tmp_path: Path,
    pg_database: Callable[[str], str],
    mlflow_server: str,
    disposed: Callable[[Any], Any],
) -> None:
    """Two ``loadertune -m`` at once on one PostgreSQL study; one is killed mid-trial."""
    storage, total = pg_database("optuna"), 8
    watch = disposed(optuna.storages.RDBStorage(storage))  # one pool for all the polling
    # Two "hosts" that are this one machine: without this, the host's timing lock would
    # (rightly) make the second wait for the first.
    args = [*shared(storage, mlflow_server, total, "two-sweeps"), PARALLEL]
    a = sweep_process(tmp_path / "a", *args)
    b = sweep_process(tmp_path / "b", *args)
    try:
        wait_for(lambda: _measuring(watch, a.pid), timeout=90)
        a.send_signal(signal.SIGKILL)
        a.communicate(timeout=600)
        # What a held when it died (it may have just finished a trial: under load the kill
        # can land between two); only the other sweep can end these now.
        held = {
            t.number
            for t in optuna.load_study(study_name="shared", storage=watch).trials
            if t.state == TrialState.RUNNING and t.user_attrs.get(TrialAttr.OWNER_PID) == a.pid
        }
        out, err = b.communicate(timeout=120)
    finally:
        for proc in (a, b):
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert b.returncode == 0, err
    assert "the study holds its 8 trials" in out

    study = optuna.load_study(study_name="shared", storage=watch)
    counted = [t for t in study.trials if _storage.counts(t)]
    assert len(counted) == total
    assert all(t.state != TrialState.RUNNING for t in study.trials)
    lost = [t for t in study.trials if t.user_attrs.get(TrialAttr.REASON) == _storage.INTERRUPTED]
    assert len(lost) <= 1 and all(t.user_attrs[TrialAttr.OWNER_PID] == a.pid for t in lost)
    assert held <= {t.number for t in lost}, "the killed sweep's running trial was failed"
    owners = {t.user_attrs[TrialAttr.OWNER_PID] for t in counted}
    assert owners == {a.pid, b.pid}, "both sweeps ran trials of the study"
    for t in counted:
        assert t.user_attrs[TrialAttr.MACHINE]["class"] == _hosts.fingerprint().machine_class
    assert study.user_attrs[StudyAttr.FINGERPRINT] == _hosts.fingerprint().as_dict()

    parents, by_number = _agree(study, mlflow_server, "two-sweeps")
    assert sorted(p.info.status for p in parents) == ["FINISHED", "KILLED"]
    assert {p.data.tags["machine.class"] for p in parents} == {_hosts.fingerprint().machine_class}
    killed = next(p for p in parents if p.info.status == "KILLED")
    for t in lost:
        assert by_number[t.number].data.tags["mlflow.parentRunId"] == killed.info.run_id
        assert by_number[t.number].data.tags["reason"] == _storage.INTERRUPTED


@pytest.mark.slow
def test_fan_out_through_submitits_local_executor(
    tmp_path: Path,
    pg_database: Callable[[str], str],
    mlflow_server: str,
    disposed: Callable[[Any], Any],
) -> None:
    """The SLURM code path, run by submitit's local executor: two workers, one study."""
    import hydra_plugins.hydra_submitit_launcher  # noqa: F401  (a dev dependency: no skip)

    storage = pg_database("fanout")
    args = [
        *shared(storage, mlflow_server, 4, "fan-out"),
        "hydra/launcher=submitit_local",
        "hydra.launcher.timeout_min=5",
        "hydra.sweeper.workers=2",
        PARALLEL,  # both "nodes" are this machine
        "trial.steps=4",
        "hydra.sweep.dir=sweep",
    ]
    proc = sweep_process(tmp_path, *args)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, out + err
    assert "worker0: " in out and "worker1: " in out
    assert "no verdict ran" in out  # verdict_repeats=0: the join recommends nothing
    sweep_dir = tmp_path / "sweep"
    assert (sweep_dir / "optimization_results.yaml").exists()
    for k in (0, 1):
        assert (sweep_dir / f"worker{k}" / "optimization_results.yaml").exists()
    study = disposed(optuna.load_study(study_name="shared", storage=storage))
    assert len([t for t in study.trials if _storage.counts(t)]) == 4
    parents, _ = _agree(study, mlflow_server, "fan-out")
    assert len(parents) == 2 and {p.info.status for p in parents} == {"FINISHED"}


@pytest.mark.slow
def test_a_host_of_another_class_is_refused_in_one_line(
    tmp_path: Path, disposed: Callable[[Any], Any]
) -> None:
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = disposed(optuna.create_study(storage=storage, study_name="s"))
    study.set_user_attr(StudyAttr.FINGERPRINT, _print().as_dict())
    proc = sweep_process(tmp_path, "hydra.sweeper.study_name=s", f"hydra.sweeper.storage={storage}")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, out + err
    (line,) = [x for x in err.splitlines() if x.startswith("loadertune:")]
    assert line.startswith("loadertune: error: hydra.sweeper.force_fingerprint=false: study s")
    assert "differs: cpu_model 'Xeon 8480' here " in line
    assert len(optuna.load_study(study_name="s", storage=storage).trials) == 0
