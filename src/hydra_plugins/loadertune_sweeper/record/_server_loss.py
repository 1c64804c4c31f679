"""A tracking server lost mid-sweep: noticed in seconds, one line and exit status 5.

MLflow's HTTP client retries a failed request for about four minutes by default, so a sweep
whose server died would log "Retrying" lines for minutes a write and never end. The sweep
bounds the retries (``result_stores.bound_tracking_retries``); a write that still fails is
told apart from a refusal by asking the server's ``/health`` (the start-up check, the one
home of that rule): gone, the recorder stops writing (:class:`TrackingLost`) and the sweep
ends with :attr:`~loadertune.errors.ExitStatus.INFRASTRUCTURE`. Optuna keeps every trial
it was told of; the next start, with the server back, adds those MLflow lacks
(``engine._repair.record_missing``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from loadertune.record import StoreUnavailable, check_tracking_server

F = TypeVar("F", bound=Callable[..., Any])


class TrackingLost(StoreUnavailable):
    """The tracking server stopped answering during the sweep; the message says what to do."""


def lost_message(uri: str, why: str) -> str:
    """The line a sweep ends with when its server is gone."""
    return (
        f"the MLflow tracking server {uri} stopped answering during the sweep ({why}). "
        "Optuna holds every trial that ended. Fix: start the server again and run the same "
        "command: the study resumes and the trials MLflow lacks are added to it"
    )


def server_gone(uri: str) -> str | None:
    """Why ``uri``'s server no longer answers (None: it answers, or is no server). A local
    store (a SQLite file) has no server to lose: its failed write is the disk's or the
    file's, said as such where the sweep ends (a full disk: one line of its own)."""
    if not uri.lower().startswith(("http://", "https://")):
        return None
    try:
        check_tracking_server(uri)
    except StoreUnavailable as exc:
        return str(exc).split(" does not answer ", 1)[-1].split(". Fix:", 1)[0].strip("()")
    return None


def guarded(write: F) -> F:
    """A recorder method that writes to MLflow: skipped once the server is lost, and a
    failure while the server is gone raises :class:`TrackingLost` instead of MLflow's error.

    The recorder has ``enabled``, ``uri`` and ``lost`` (the line, once the server is gone).
    """

    @functools.wraps(write)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.enabled and self.lost:
            raise TrackingLost(self.lost)
        try:
            return write(self, *args, **kwargs)
        except TrackingLost:
            raise
        except Exception as exc:
            why = server_gone(self.uri) if self.enabled else None
            if why is None:
                raise
            self.lost = lost_message(self.uri, why)
            raise TrackingLost(self.lost) from exc

    return wrapper  # type: ignore[return-value]
