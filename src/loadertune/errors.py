"""How loadertune ends on an error: a one-line error a person can act on, and the exit status
each error ends a command with, so scripts and CI tell success from each kind of failure.

Exit status 0 only when the command did what it was asked: a single trial measured, or a sweep
that ended with a recommendation. Every other ending has its own status, documented in the
README's "When trials fail" section and printed nowhere else, so this module is the one place
they are defined.
"""

from __future__ import annotations

from enum import IntEnum


class ExitStatus(IntEnum):
    """How a ``loadertune`` command ended."""

    OK = 0
    """A trial measured; a sweep ended with a recommendation."""
    BAD_INPUT = 2
    """A config value was refused before anything ran; the line names the key and the fix."""
    NO_RESULT = 3
    """Every trial failed or was pruned (or the single trial failed): nothing to recommend."""
    DATASET_BUG = 4
    """An error in the user's code (the dataset or the training step): the sweep stopped on its
    recurring, or the single trial raised it. Fix it first."""
    INFRASTRUCTURE = 5
    """A store or the disk failed: tracking server unreachable, disk full, read-only path."""
    INTERNAL = 70
    """A bug in loadertune itself (``EX_SOFTWARE``), not in the dataset, the step or a
    setting: the traceback is printed whole, to be reported."""
    BUSY = 75
    """Another timing process holds this host (``EX_TEMPFAIL``: try again later)."""
    INTERRUPTED = 130
    """Ctrl-C (or SIGINT): every finished trial is recorded; run the command again to resume."""


def status_of(exc: BaseException, default: ExitStatus = ExitStatus.NO_RESULT) -> ExitStatus:
    """The status an error ends a command with, whichever command (a trial, a sweep, the
    fan-out over hosts): the error's own (``exit_status``: each error a command ends on
    says its status, :class:`loadertune.errors.ConfigError` ``BAD_INPUT``,
    ``HostBusy`` ``BUSY``, ``StoreUnavailable`` ``INFRASTRUCTURE``, a failed trial by its
    reason), Ctrl-C's, the status a ``SystemExit`` carries (a sweep worker's), else
    ``default``."""
    if isinstance(exc, KeyboardInterrupt):
        return ExitStatus.INTERRUPTED
    if isinstance(exc, SystemExit):
        known = {int(s) for s in ExitStatus}
        return ExitStatus(exc.code) if isinstance(exc.code, int) and exc.code in known else default
    own = getattr(exc, "exit_status", None)
    return own if isinstance(own, ExitStatus) else default


class ConfigError(ValueError):
    """A config value that cannot work, named by its full key, with the fix.

    The message reads like ``loader.prefetch_factor=4: needs loader.num_workers > 0. Fix: ...``
    so the command line can print it as one line and exit non-zero before any worker starts.
    """

    exit_status = ExitStatus.BAD_INPUT

    def __init__(self, key: str, value: object, problem: str, fix: str) -> None:
        self.key = key
        self.value = value
        self.problem = problem
        self.fix = fix
        super().__init__(f"{key}={_show(value)}: {problem}. Fix: {fix}")


def _show(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
