"""A tracking URI that cannot take a run is refused at start-up, in one line, before a trial
runs or a study is opened: a scheme MLflow has no store for (status 2), an HTTP server that is
no MLflow server, a SQLite file whose folder cannot be written (status 5)."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadertune.errors import ConfigError, ExitStatus
from loadertune.record._result_stores import MLFLOW_SCHEMES, StoreUnavailable, check_tracking_server
from tests._cli import run_cli, run_main
from tests._mlflow_server import free_port
from tests.conftest import with_tiny

OURS = "loadertune: "  # how each of loadertune's own lines on stderr starts
TRIAL = ["model=simulated", "model.step_ms=1", "trial.steps=8", "trial.warmup_steps=1"]


@contextlib.contextmanager
def plain_http_server(root: Path) -> Iterator[str]:
    """Python's own file server on a free loopback port: it answers, and is no MLflow."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/", timeout=5):
                    break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "no server"
                time.sleep(0.1)
        yield uri
    finally:
        proc.kill()
        proc.wait()


def trial_status(out: Path, uri: str, *first: str) -> subprocess.CompletedProcess[str]:
    args = [f"paths.output_root={out}", f"tracking.tracking_uri={uri}", "trial.host_lock=off"]
    return run_cli(out, *first, *args, *with_tiny(TRIAL), timeout=300)


SWEEP = ["-m", "hydra.sweeper.n_trials=1", "hydra.sweeper.study_name=s"]


def _refused(out: Path, uri: str, status: int, words: str) -> None:
    """A single trial and a sweep, each the real command, both refuse ``uri`` in one line,
    with ``status``."""
    for first in ([], SWEEP):
        proc = trial_status(out, uri, *first)
        _said_once(proc.returncode, proc.stdout, proc.stderr, out, status, words)


def _refused_here(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    out: Path,
    uri: str,
    status: int,
    words: str,
) -> None:
    """As :func:`_refused`, each command's main run in this process."""
    for first in ([], SWEEP):
        args = [f"paths.output_root={out}", f"tracking.tracking_uri={uri}", "trial.host_lock=off"]
        code = run_main(monkeypatch, out, *first, *args, *with_tiny(TRIAL))
        said = capsys.readouterr()
        _said_once(code, said.out, said.err, out, status, words)


def _said_once(code: int, out: str, err: str, root: Path, status: int, words: str) -> None:
    assert code == status, err
    assert err.splitlines() == [err.strip()], err
    assert err.startswith("loadertune: error: "), err
    assert words in err and "Fix: " in err, err
    assert not (root / "optuna.db").exists()  # no study opened
    assert "trial" not in out.lower()  # no trial ran


def test_a_scheme_mlflow_has_no_store_for_is_bad_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In-process (the real command refuses a server that is no MLflow server below)."""
    _refused_here(
        monkeypatch,
        capsys,
        tmp_path,
        "bogus://somewhere/db",
        ExitStatus.BAD_INPUT,
        "tracking.tracking_uri=bogus://somewhere/db: MLflow has no tracking store for the "
        "scheme bogus://",
    )


@pytest.mark.slow
def test_an_http_server_that_is_no_mlflow_server_is_refused(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "health").write_text("OK")  # even a /health that answers
    with plain_http_server(site) as uri:
        _refused(
            tmp_path,
            uri,
            ExitStatus.INFRASTRUCTURE,
            f"tracking.tracking_uri={uri}: answers, but is no MLflow tracking server",
        )


def test_a_sqlite_store_whose_folder_cannot_be_written_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In-process (the real command refuses a server that is no MLflow server above)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")  # even root cannot make a folder below a file
    uri = f"sqlite:///{blocker}/mlflow.db"
    _refused_here(
        monkeypatch, capsys, tmp_path, uri, ExitStatus.INFRASTRUCTURE, "tracking.tracking_uri="
    )


@pytest.mark.parametrize(
    "uri",
    [
        "",
        "mlruns",
        "file:///tmp/mlruns",
        "postgresql+psycopg2://user@db.invalid/mlflow",
        "mysql://db.invalid/mlflow",
        "databricks",
        "sqlite://",  # in memory
    ],
)
def test_other_stores_pass_to_mlflow(uri: str) -> None:
    check_tracking_server(uri)  # no error: a database server is MLflow's to reach


def test_a_sqlite_file_in_a_new_folder_passes(tmp_path: Path) -> None:
    check_tracking_server(f"sqlite:///{tmp_path / 'new' / 'mlflow.db'}")
    assert (tmp_path / "new").is_dir()


def test_the_refusals_are_their_kinds() -> None:
    with pytest.raises(ConfigError):
        check_tracking_server("s3://bucket/mlflow")
    with pytest.raises(StoreUnavailable, match="does not answer"):
        check_tracking_server(f"http://127.0.0.1:{free_port()}", timeout_s=2)


def test_the_schemes_are_mlflows_own() -> None:
    """The list the check reads is what the installed MLflow registers (its registry is
    private: read here, never in src/)."""
    from mlflow.tracking._tracking_service import utils

    assert set(utils._tracking_store_registry._registry) == MLFLOW_SCHEMES


@pytest.mark.slow
def test_sweeps_on_a_tracking_server_print_no_library_line(tmp_path: Path) -> None:
    """Two sweeps one after the other on one fresh server store, the second resuming the
    study: the console is the sweep's own. MLflow prints "View run ... at" and "View
    experiment at" for every run it ends on a server (the summary names the UI once); no
    library's warning (``...Warning:``) nor log line reaches the console either."""
    from tests._mlflow_server import mlflow_server

    out = tmp_path / "out"
    out.mkdir()
    store = f"sqlite:///{tmp_path / 'server.db'}"
    sweep = ["-m", "hydra.sweeper.n_trials=2", "hydra.sweeper.study_name=s"]
    with mlflow_server(store, tmp_path / "artifacts", tmp_path) as uri:
        first = trial_status(out, uri, *sweep, "hydra.sweeper.verdict_repeats=0")
        second = trial_status(out, uri, *sweep, "hydra.sweeper.verdict_repeats=2")
    for proc in (first, second):
        assert proc.returncode == ExitStatus.OK, proc.stderr
        assert "[2/2] trial" in proc.stdout
        console = proc.stdout + proc.stderr
        assert "View run" not in console and "View experiment" not in console
        assert re.search(r"\w+Warning\b", console) is None, console
        theirs = [x for x in proc.stderr.splitlines() if x.strip() and not x.startswith(OURS)]
        assert theirs == [], proc.stderr
    assert "2 earlier trials" in second.stdout  # resumed, with the verdict measured
