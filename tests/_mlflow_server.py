"""A real ``mlflow server`` on a free loopback port, for the tests that read MLflow over HTTP.

One worker (two cores are shared with the sweeps under test), job execution off, in a session
of its own so its uvicorn worker stops with it. A server that does not answer ``/health``
within ``START_S`` fails the test with the end of its log: the UI is what a person reviews.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

START_S = 120  # a cold start on two busy cores takes 10 to 20 s, far more under load


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    """A started server: its URI, and :meth:`kill` to take it down mid-test (a crash)."""

    def __init__(self, proc: subprocess.Popen[bytes], uri: str) -> None:
        self.proc, self.uri = proc, uri

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Stop the server and its uvicorn worker (SIGKILL: no goodbye to any client)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@contextlib.contextmanager
def mlflow_server(store: str, artifacts: Path, root: Path) -> Iterator[str]:
    """``mlflow server`` on ``store`` with artifacts in ``artifacts``; yields its URI."""
    with mlflow_server_process(store, artifacts, root) as server:
        yield server.uri


@contextlib.contextmanager
def mlflow_server_process(
    store: str, artifacts: Path, root: Path, port: int | None = None
) -> Iterator[Server]:
    """As :func:`mlflow_server`, yielding the :class:`Server` (on ``port``, if given)."""
    port = port or free_port()
    log_path = root / "server.log"
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    env.pop("MLFLOW_TRACKING_URI", None)
    with log_path.open("a") as log:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "mlflow", "server"),
                *("--backend-store-uri", store),
                *("--artifacts-destination", str(artifacts)),
                *("--host", "127.0.0.1", "--port", str(port), "--workers", "1"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=root,
            start_new_session=True,  # its uvicorn worker goes with it
        )
    server = Server(proc, f"http://127.0.0.1:{port}")
    try:
        _wait_healthy(server.uri, proc, log_path)
        yield server
    finally:
        server.kill(signal.SIGTERM)


def _wait_healthy(uri: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Until ``/health`` answers."""
    deadline = time.monotonic() + START_S
    while True:
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"{uri}/health", timeout=2) as answer,
        ):
            if answer.status == 200:
                return
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"mlflow server did not start:\n{log.read_text()[-2000:]}")
        time.sleep(0.25)
