"""Scale-out: wall time of one vs two sweep processes on one study, and storage cost per trial.

1. ``wall``: ``loadertune -m`` with ``count_trials=study`` to a fixed number of trials, once
   with one process and once with two processes started together on the same PostgreSQL
   study, logging to one ``mlflow server`` on PostgreSQL. Reports wall time from start to the
   last process's exit, and the span from the first trial's start to the last trial's end.
   On a small machine the two processes share its cores, so their timings disturb each other:
   this shows that the study is shared correctly, not what separate nodes would gain.
2. ``race``: several processes opening the study storage at the same instant on an empty
   PostgreSQL database, with Optuna's ``RDBStorage`` alone and through ``_study``'s retry.
3. ``storage``: the Optuna storage traffic of one sweep trial (hand-out through ``Slots``,
   claim, suggestions, attributes, pruner reports, tell), replayed without measuring anything,
   against an SQLite file and against PostgreSQL (with the heartbeats a server study uses).

    bash scripts/ci_postgres.sh          # PostgreSQL on 127.0.0.1:5432
    .venv/bin/python benchmarks/scaleout.py [wall|race|storage|all] [--trials 12] [--replay 100]
        [--step-ms 20 100]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parents[1]
ADMIN = os.environ.get(
    "LOADERTUNE_TEST_PG", "postgresql://loadertune:loadertune@127.0.0.1:5432/postgres"
)
WORKLOAD = [
    "model=simulated",
    "trial.steps=40",
    "trial.warmup_steps=2",
    "dataset.count=256",
    "loader.batch_size=8",
    "hydra.sweeper.sampler=random",
    "hydra.sweeper.pruner=none",
    "hydra.sweeper.verdict_repeats=0",
    "hydra.sweeper.study_name=bench",
    "hydra.sweeper.count_trials=study",
    "hydra.sweeper.params.loader.num_workers=int(interval(0,2))",
]


def fresh_database(purpose: str) -> str:
    """A new, empty PostgreSQL database; its URL."""
    import psycopg

    name = f"ltbench_{purpose}_{os.getpid()}"
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return ADMIN.rsplit("/", 1)[0] + "/" + name


@contextlib.contextmanager
def mlflow_server(root: Path, port: int = 5099) -> Iterator[str]:
    """``mlflow server`` on a fresh PostgreSQL database, on loopback."""
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    log = (root / "mlflow-server.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            fresh_database("mlflow"),
            "--artifacts-destination",
            str(root / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        for _ in range(400):
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{uri}/health", timeout=2):
                break
            time.sleep(0.25)
        yield uri
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()


def wall(
    n_trials: int, processes: int, step_ms: int, tracking: str, root: Path
) -> tuple[float, float]:
    """(wall s, first-trial-start to last-trial-end s) of ``processes`` sweeps on one study."""
    storage = fresh_database(f"wall{processes}_{step_ms}")
    script = str(Path(sys.executable).with_name("loadertune"))
    args = [
        *WORKLOAD,
        f"model.step_ms={step_ms}",  # an accelerator step: the process waits, holding no CPU
        f"hydra.sweeper.n_trials={n_trials}",
        f"hydra.sweeper.storage={storage}",
        f"tracking.tracking_uri={tracking}",
        f"tracking.experiment=bench-{processes}-{step_ms}",
    ]
    start = time.perf_counter()
    procs = []
    for k in range(processes):
        out = root / f"p{processes}-{step_ms}-{k}"
        out.mkdir()
        procs.append(
            subprocess.Popen(
                [script, "-m", f"paths.output_root={out}", *args],
                cwd=out,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for proc in procs:
        _, err = proc.communicate()
        if proc.returncode:
            sys.exit(err)
    elapsed = time.perf_counter() - start
    trials = optuna.load_study(study_name="bench", storage=storage).trials
    done = [t for t in trials if t.datetime_start and t.datetime_complete]
    assert sum(t.state == optuna.trial.TrialState.COMPLETE for t in done) == n_trials
    span = max(t.datetime_complete for t in done) - min(t.datetime_start for t in done)  # type: ignore[type-var]
    return elapsed, span.total_seconds()


def replay(storage_url: str, n: int) -> list[float]:
    """Seconds of storage traffic for each of ``n`` trials of one sweep, nothing measured."""
    from hydra_plugins.loadertune_sweeper.study import _storage

    study = _storage.open_study(
        storage_url,
        "replay",
        "minimize",
        optuna.samplers.RandomSampler(seed=0),
        optuna.pruners.NopPruner(),
    )
    slots = _storage.Slots(study, total=n)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        trial = slots.next()
        assert trial is not None
        trial.set_user_attr("mlflow_parent_run_id", "0" * 32)
        workers = trial.suggest_int("loader.num_workers", 0, 4)
        if workers:
            trial.suggest_categorical("loader.prefetch_factor", [1, 2, 4, 8])
        trial.set_user_attr("overrides", [f"loader.num_workers={workers}"])
        trial.set_user_attr("effective_key", f"w{workers}")
        study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))  # repeats?
        for step in range(5, 41, 5):  # 40 timed steps, a report every 5
            trial.report(1.0 + step / 1000, step)
            trial.should_prune()
        for key in ("wall_s", "leaked_processes", "shm_files_removed", "oom_kills", "timed_steps"):
            trial.set_user_attr(key, 0)
        study.tell(trial, 1.0)
        study._storage.get_trial(trial._trial_id)
        times.append(time.perf_counter() - t0)
    slots.close()
    return times


RACE = """
import sys, time, optuna
from hydra_plugins.loadertune_sweeper.study import _storage
url, mode, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
while time.time() < start:
    time.sleep(0.001)
try:
    optuna.storages.RDBStorage(url) if mode == "plain" else _storage._storage(url, 10, 60)
    print("ok")
except Exception as exc:
    print(type(exc).__name__)
"""


def race(rounds: int = 3, processes: int = 4) -> None:
    """Processes opening the storage at the same instant on an empty PostgreSQL database."""
    for mode in ("plain", "open_study"):
        outcomes: list[str] = []
        for _ in range(rounds):
            url = fresh_database("race")
            start = str(time.time() + 6)  # after every process has imported Optuna
            procs = [
                subprocess.Popen(
                    [sys.executable, "-c", RACE, url, mode, start],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                for _ in range(processes)
            ]
            outcomes += [p.communicate()[0].strip() for p in procs]
        summary = ", ".join(f"{outcomes.count(o)} {o}" for o in sorted(set(outcomes)))
        print(f"race, {processes} processes x {rounds} rounds, {mode}: {summary}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "what", nargs="?", default="all", choices=("wall", "storage", "race", "all")
    )
    parser.add_argument("--trials", type=int, default=12, help="trials of the wall-time study")
    parser.add_argument("--replay", type=int, default=100, help="trials replayed per storage")
    parser.add_argument(
        "--step-ms",
        type=int,
        nargs="+",
        default=[20],
        help="simulated accelerator step(s) in ms; larger leaves the CPUs idle during a trial",
    )
    a = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="loadertune-scaleout-"))
    print(f"{os.cpu_count()} CPUs; outputs in {root}")
    if a.what in ("wall", "all"):
        with mlflow_server(root) as tracking:
            for step_ms, processes in itertools.product(a.step_ms, (1, 2)):
                elapsed, span = wall(a.trials, processes, step_ms, tracking, root)
                print(
                    f"model.step_ms={step_ms}: {processes} process(es), {a.trials} trials: "
                    f"wall {elapsed:.1f} s, first trial start to last trial end {span:.1f} s"
                )
    if a.what in ("race", "all"):
        race()
    if a.what in ("storage", "all"):
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        for label, url in (
            ("sqlite", f"sqlite:///{root / 'replay.db'}"),
            ("postgresql", fresh_database("replay")),
        ):
            times = replay(url, a.replay)
            ms = sorted(t * 1000 for t in times)
            print(
                f"storage {label}: per trial median {statistics.median(ms):.1f} ms, "
                f"p90 {ms[int(len(ms) * 0.9)]:.1f} ms, last 10 trials mean "
                f"{statistics.mean(t * 1000 for t in times[-10:]):.1f} ms ({a.replay} trials)"
            )


if __name__ == "__main__":
    main()
