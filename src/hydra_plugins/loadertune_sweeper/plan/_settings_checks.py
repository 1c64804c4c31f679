"""The ``hydra.sweeper`` settings typed and checked before a study is opened; each names its key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import OmegaConf

from loadertune.checks import check_mode
from loadertune.config import structured
from loadertune.errors import ConfigError

from ..config import SweepSettings

_KEY = "hydra.sweeper"
BUSY_MODES = ("warn", "wait", "ignore")
SEARCH_WINDOWS = ("steps", "precise")
_STORAGE_SCHEMES = ("sqlite", "postgresql", "mysql", "oracle", "mssql")
_POSITIVE = (  # seconds, MB or hours, > 0 (those in _OR_NULL may be null)
    "startup_timeout_s",
    "stall_timeout_s",
    "busy_wait_s",
    "trial_timeout_s",
    "memory_budget_mb",
    "train_hours",
)
_OR_NULL = ("trial_timeout_s", "memory_budget_mb", "train_hours")
_COMMENTS = "conf/config.yaml, under hydra.sweeper"


def sweep_settings(raw: Mapping[str, Any]) -> SweepSettings:
    """The settings Hydra composed (untyped), typed by :class:`SweepSettings` and checked.

    Raises:
        ConfigError: naming the first key whose type (OmegaConf's own check) or value
            cannot work, with the fix.
    """
    node = OmegaConf.create(dict(raw))
    settings: SweepSettings = structured(_KEY, SweepSettings, node, _COMMENTS)
    check_settings(settings)
    return settings


def check_settings(s: SweepSettings) -> None:
    """Raise :class:`ConfigError` for the first setting whose value cannot work."""
    _at_least(s.n_trials, "n_trials", 1, "e.g. hydra.sweeper.n_trials=12")
    check_mode(f"{_KEY}.host_lock", s.host_lock)
    if s.max_trials_total is not None:
        _at_least(s.max_trials_total, "max_trials_total", 0, "or null for no cap")
    _at_least(s.report_every, "report_every", 1, "e.g. hydra.sweeper.report_every=5")
    _at_least(s.verdict_top, "verdict_top", 1, "e.g. hydra.sweeper.verdict_top=3")
    _at_least(s.verdict_repeats, "verdict_repeats", 0, "e.g. 3, or 0 to skip the verdict")
    if not 0.0 <= s.max_failure_rate <= 1.0:
        raise ConfigError(
            f"{_KEY}.max_failure_rate",
            s.max_failure_rate,
            "must be in [0, 1]",
            "e.g. hydra.sweeper.max_failure_rate=1.0 to never stop for crashes",
        )
    _busy(s)
    if s.search_window not in SEARCH_WINDOWS:
        raise ConfigError(
            f"{_KEY}.search_window",
            s.search_window,
            f"must be one of {', '.join(SEARCH_WINDOWS)}",
            "e.g. hydra.sweeper.search_window=precise to time each search trial until "
            "trial.precision",
        )
    for name in _POSITIVE:
        value = getattr(s, name)
        if value is not None and value <= 0:
            or_null = ", or null" if name in _OR_NULL else ""
            raise ConfigError(
                f"{_KEY}.{name}", value, "must be > 0", f"e.g. hydra.sweeper.{name}=60{or_null}"
            )
    _direction(s.direction)
    if s.storage is not None:
        scheme = s.storage.split(":", 1)[0].split("+", 1)[0]
        if "://" not in s.storage or scheme not in _STORAGE_SCHEMES:
            raise ConfigError(
                f"{_KEY}.storage",
                s.storage,
                "is not a database URL Optuna can use",
                "e.g. sqlite:///outputs/optuna.db or postgresql://user@host/db, or null",
            )
    if s.study_name is not None and not s.study_name.strip():
        raise ConfigError(
            f"{_KEY}.study_name", s.study_name, "is empty", "give it a name, or null to derive one"
        )


def _at_least(value: int, name: str, low: int, fix: str) -> None:
    if value < low:
        raise ConfigError(f"{_KEY}.{name}", value, f"must be an integer >= {low}", fix)


def _direction(direction: Any) -> None:
    values = direction if isinstance(direction, list | tuple) else [direction]
    for value in values:
        if str(value).lower() not in ("minimize", "maximize"):
            raise ConfigError(
                f"{_KEY}.direction",
                value,
                "is not minimize or maximize",
                "use hydra.sweeper.direction=minimize (time per sample: lower is better)",
            )


def _busy(s: SweepSettings) -> None:
    """``busy``, and ``busy_cpu_percent``."""
    if s.busy not in BUSY_MODES:
        raise ConfigError(
            f"{_KEY}.busy",
            s.busy,
            f"is not one of {', '.join(BUSY_MODES)}",
            "hydra.sweeper.busy=warn (say when other work touched the results), wait (wait "
            "for quiet before each window) or ignore",
        )
    if s.busy_cpu_percent <= 0:
        raise ConfigError(
            f"{_KEY}.busy_cpu_percent",
            s.busy_cpu_percent,
            "must be a number > 0 (% of one core that other work may use)",
            "e.g. hydra.sweeper.busy_cpu_percent=50",
        )
