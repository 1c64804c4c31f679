"""The few places loadertune goes past Hydra's public API, each in one name with why.

The rest is the API Hydra's own launchers and sweepers use: ``hydra.core.utils.run_job`` and
``JobReturn``, ``hydra.core.plugins.Plugins``, ``HydraConfig``, ``ConfigStore`` and the
override parser. Hydra has no public name for its default launcher, a failed job's
``JobReturn`` gives its exception only by raising it, and Hydra reports an override it cannot
apply (a misspelled key, a group option that does not exist, an override it cannot parse)
from ``hydra._internal.utils.run_and_report`` in several lines of its own wording with exit
status 1, which the README's table does not have: the command wants one line naming the key
and the fix, and status 2, as for every other bad input, and Hydra has no hook for it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from hydra._internal import utils
from hydra.errors import ConfigCompositionException, OverrideParseException

if TYPE_CHECKING:
    from hydra.core.utils import JobReturn

# The ``_target_`` of Hydra's default launcher (``hydra/launcher=basic``), from its
# ``hydra._internal`` package: how a config with no launcher chosen reads, and what a fanned-out
# worker sets so its trials run on its own node.
BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


def job_error(ret: JobReturn) -> Any:
    """The exception a failed job raised (``status`` FAILED), without raising it.

    ``JobReturn._return_value``: the public ``return_value`` of a failed job writes a line to
    stderr and raises the exception; the sweeper reports it instead (a trial's reason, a
    worker's one-line summary).
    """
    return ret._return_value


@contextlib.contextmanager
def composition_errors(handle: Callable[[Exception], None]) -> Iterator[None]:
    """While open, Hydra's composition and override errors go to ``handle`` (which may exit)
    before Hydra's own report; anything else is reported by Hydra as before."""
    real = utils.run_and_report

    def reporting(func: Any) -> Any:
        def guarded() -> Any:
            try:
                return func()
            except (ConfigCompositionException, OverrideParseException) as exc:
                handle(exc)
                raise

        return real(guarded)

    utils.run_and_report = reporting
    try:
        yield
    finally:
        utils.run_and_report = real
