"""Errors that loadertune reports to a person as one line."""

from __future__ import annotations

from loadertune.exit_status import ExitStatus


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
