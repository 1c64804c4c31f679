"""Where results go, checked before anything runs; files written whole or not at all.

A tracking server that does not answer costs minutes of MLflow's retries and a long
traceback after the trials ran; a full disk or a read-only output root crashes a sweep half
way and leaves empty result files. Both are checked at the start in one line that names the
place and the fix (:class:`StoreUnavailable`, exit status 5), and result files are written
to a temporary file and renamed, so a file is either the old one or the new one, never empty.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

from loadertune._lazy import mlflow
from loadertune.errors import ConfigError, ExitStatus
from loadertune.record._mlflow_store import open_store

REACH_TIMEOUT_S = 5.0
MIN_FREE_MB = 50  # below this, the stores' next writes may fail half way
BOUNDED_RETRIES = {  # MLflow's HTTP client: about 4 minutes of retries a request by default
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "15",
}
"""A server gone mid-run fails a write in seconds: 2 retries, 1 s and 2 s apart, 15 s a try."""


class StoreUnavailable(Exception):
    """A store or the disk cannot take the results; the message names it and the fix."""

    exit_status = ExitStatus.INFRASTRUCTURE


MLFLOW_SCHEMES = frozenset(
    {"", "file", "http", "https", "databricks", "databricks-uc", "uc"}
    | {"postgresql", "mysql", "sqlite", "mssql"}  # SQLAlchemy's, with or without +driver
)
"""The tracking URI schemes MLflow has a store for (its tracking store registry); a plugin
adds its own as an ``mlflow.tracking_store`` entry point."""
SEARCH = "api/2.0/mlflow/experiments/search?max_results=1"  # what every MLflow server answers
URI_KEY = "tracking.tracking_uri"
LOCAL = "unset tracking.tracking_uri / MLFLOW_TRACKING_URI to record under the output root"


def check_tracking_server(uri: str, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """Raise if the tracking URI cannot take a run, before anything is recorded.

    A scheme MLflow has no store for is bad input (:class:`ConfigError`); an http(s) server
    that does not answer within ``timeout_s``, or answers but is no MLflow server, and a
    SQLite file that cannot be written are stores that cannot work (:class:`StoreUnavailable`).
    Other stores (a database server, a plugin's) are MLflow's to reach.
    """
    scheme = _scheme(uri)
    if scheme in ("http", "https"):
        _check_server(uri, timeout_s)
    elif scheme == "sqlite":
        _check_sqlite(uri)
    elif scheme not in MLFLOW_SCHEMES and scheme not in _plugin_schemes():
        raise ConfigError(
            URI_KEY,
            uri,
            f"MLflow has no tracking store for the scheme {scheme}://",
            "use a path, sqlite:///<file>, http(s)://<mlflow server> or a database URL "
            "(postgresql://, mysql://, mssql://); MLFLOW_TRACKING_URI is read when "
            f"{URI_KEY} is unset",
        )


def _scheme(uri: str) -> str:
    """The URI's scheme as MLflow reads it: a database's without its ``+driver``, a Windows
    drive letter none."""
    scheme = urllib.parse.urlparse(uri).scheme.lower().split("+", 1)[0]
    return "" if len(scheme) == 1 else scheme


def _plugin_schemes() -> set[str]:
    return {e.name for e in entry_points(group="mlflow.tracking_store")}


def _check_server(uri: str, timeout_s: float) -> None:
    """The server answers MLflow's REST API (or asks for credentials, as behind auth)."""
    url = f"{uri.rstrip('/')}/{SEARCH}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            body = answer.read()
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):  # behind auth: the runs will say whether the login works
            return
        said = f"HTTP {exc.code} {exc.reason}"
    except (OSError, ValueError) as exc:
        why = getattr(exc, "reason", exc)
        raise StoreUnavailable(
            f"the MLflow tracking server {uri} does not answer ({why}). Fix: start it "
            f"(scripts/mlflow_server.sh), correct the address, or {LOCAL}"
        ) from None
    else:
        with contextlib.suppress(ValueError):
            if isinstance(json.loads(body or b"null"), dict):
                return
        said = "an answer that is not MLflow's JSON"
    raise StoreUnavailable(
        f"{URI_KEY}={uri}: answers, but is no MLflow tracking server (GET {url}: {said}). "
        f"Fix: give the MLflow server's address, or {LOCAL}"
    )


def _check_sqlite(uri: str) -> None:
    """The SQLite file's folder can be written (created if missing), and so can the file."""
    path = uri.partition("sqlite:///")[2]
    if not path or path == ":memory:":
        return
    db = Path(path)
    check_writable(db.parent, URI_KEY)
    if db.exists() and not os.access(db, os.W_OK):
        raise StoreUnavailable(
            f"{URI_KEY}={uri}: the SQLite file cannot be written (read-only). Fix: make it "
            f"writable, or {LOCAL}"
        )


def bound_tracking_retries() -> None:
    """Set :data:`BOUNDED_RETRIES` in this process's environment (and so its children's),
    leaving any the user set: a sweep notices a dead tracking server in seconds, not minutes."""
    for key, value in BOUNDED_RETRIES.items():
        os.environ.setdefault(key, value)


@contextlib.contextmanager
def bounded_tracking_retries() -> Iterator[None]:
    """:func:`bound_tracking_retries` for the writes inside, then the environment as it was
    (a library call inside the user's process changes nothing of it for good). The store
    those writes go to (MLflow's current tracking URI, as a bare ``MlflowClient()`` takes it)
    is opened first as every path opens one (:func:`loadertune.record._mlflow_store.open_store`), so
    a fresh SQLite store a sweep is making at the same moment is not migrated twice."""
    before = {key: os.environ.get(key) for key in BOUNDED_RETRIES}
    bound_tracking_retries()
    try:
        open_store(mlflow.get_tracking_uri())
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def check_writable(folder: str | Path, key: str = "paths.output_root") -> None:
    """Raise if ``folder`` cannot be created or written, or its disk is all but full."""
    path = Path(folder)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".loadertune-write-check-{os.getpid()}"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as exc:
        raise StoreUnavailable(describe_os_error(exc, path, key)) from None
    free_mb = shutil.disk_usage(path).free / 2**20
    if free_mb < MIN_FREE_MB:
        raise StoreUnavailable(
            f"{key}={path}: only {free_mb:.0f} MB free on its disk (at least {MIN_FREE_MB} MB "
            f"needed for the stores and results). Fix: free space, or set {key} elsewhere"
        )


def describe_os_error(exc: OSError, path: Path, key: str = "paths.output_root") -> str:
    """One line for a failed write: what, where, and the fix."""
    if exc.errno == errno.ENOSPC or "disk is full" in str(exc):
        return f"{key}={path}: the disk is full. Fix: free space, or set {key} elsewhere"
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return (
            f"{key}={path}: cannot write there ({os.strerror(exc.errno or 0)}). Fix: "
            f"choose a writable {key}"
        )
    return f"{key}={path}: {exc.strerror or exc}. Fix: check the path and its disk"


def is_disk_full(exc: BaseException, folder: str | Path | None = None) -> bool:
    """A write failed for want of space: the OS or SQLite said so anywhere in the chain of
    causes (Optuna's storage error wraps SQLAlchemy's, which wraps SQLite's), or ``folder``'s
    disk has no room left (SQLite may say only "disk I/O error" when its journal cannot grow)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno == errno.ENOSPC:
            return True
        if says_disk_full(str(seen)):
            return True
        seen = seen.__cause__ or seen.__context__
    return folder is not None and _no_room(Path(folder))


def _no_room(folder: Path) -> bool:
    """Under a megabyte free on ``folder``'s disk: no store's next write fits."""
    try:
        return shutil.disk_usage(folder).free < 2**20
    except OSError:
        return False


def says_disk_full(text: str) -> bool:
    """An error's text says a disk is full (``/dev/shm`` aside: that is a setting's limit)."""
    lowered = text.lower()
    full = "disk is full" in lowered or "no space left on device" in lowered
    return full and "shm" not in lowered and "shared memory" not in lowered


def write_text_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole: a temporary file beside it, then a rename.

    On failure (a full disk) the old file, if any, is left as it was, and no temporary file
    is left behind.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
