"""How a sweep ends when it cannot go on: one line, its exit status, nothing lost.

The statuses are :class:`loadertune.errors.ExitStatus`. Stores are checked before the
study is opened (:func:`check_stores`), so an unreachable tracking server or a full disk
leaves no study with waiting trials behind; a failing trial's error is shown once, so a sweep
whose trials all fail is never silent.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, NoReturn

from loadertune.checks import check_lock_dir
from loadertune.errors import ConfigError, ExitStatus
from loadertune.record import StoreUnavailable, check_tracking_server, check_writable, tracking_uri

if TYPE_CHECKING:
    from ..plan._sweep_plan import SweepPlan
    from ..record._console import SweepView
    from ..trial._outcome import Answer

INFRA = ExitStatus.INFRASTRUCTURE
ERROR_LINES = 4  # lines of the first failed trial's error shown in the terminal


def fail(message: str, status: ExitStatus = ExitStatus.BAD_INPUT) -> NoReturn:
    """Bad input (or a store that cannot work): one line, its exit status."""
    print(f"loadertune: error: {message}", file=sys.stderr)
    sys.exit(int(status))


def check_stores(plan: SweepPlan, lock_mode: str = "off") -> None:
    """The output root writable with room to spare, the tracking server answering, the host's
    timing lock's folder usable (unless ``lock_mode`` is off)."""
    base = plan.base
    try:
        check_writable(base.paths.output_root)
        if base.tracking.enabled:
            check_tracking_server(tracking_uri(base.tracking, base.paths.output_root))
        if lock_mode != "off":
            check_lock_dir()
    except StoreUnavailable as exc:
        fail(str(exc), INFRA)
    except ConfigError as exc:  # a tracking URI no MLflow store serves
        fail(str(exc))


def show_first_error(view: SweepView, answer: Answer) -> bool:
    """The first failed trial's error, its last lines; True once shown."""
    lines = [line for line in (answer.error or "").strip().splitlines() if line.strip()]
    tail = "\n    ".join(lines[-ERROR_LINES:])
    view.note(
        f"trial {answer.trial.number} failed ({answer.reason}); its error ends:\n    {tail}\n"
        "  (the whole text: error.txt in its MLflow run; later failures are counted, not shown)"
    )
    return True
