"""The few places the sweeper goes past Hydra's public plugin API, each in one name with why.

The rest is the API Hydra's own launchers and sweepers use: ``hydra.core.utils.run_job`` and
``JobReturn``, ``hydra.core.plugins.Plugins``, ``HydraConfig``, ``ConfigStore`` and the
override parser. Hydra has no public name for its default launcher, and a failed job's
``JobReturn`` gives its exception only by raising it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
