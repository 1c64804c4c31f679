"""Guards around a running trial: its memory budget, its workers, how it is stopped and ends.

Rooms (the names other packages use are re-exported below, each room imported on the first
use of one of its names, so importing the package imports none of them):

- ``_memory_watch``: keep a trial's process tree under its memory budget: when to sample, and when
  to stop it.
- ``_process_end``: how the ``loadertune`` command ends: its exit status, without Python's own
  teardown.
- ``_trial_stop``: stop a running trial from a guard's thread: end its workers, fail its main
  thread.
- ``_worker_output``: read what the trial's DataLoader workers print, and catch the errors PyTorch
  only prints.
- ``_worker_tether``: processes of a trial that die with the process that started them, whenever it
  dies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadertune._lazy import lazy_package

__all__ = [
    "BudgetPacer",
    "TrialMemoryWatch",
    "die_with_parent",
    "end",
    "expect_workers",
    "footprint_reader",
    "listen_for_workers",
    "tether",
    "trial_guards",
]

if TYPE_CHECKING:
    from loadertune.guards._memory_watch import (
        BudgetPacer,
        TrialMemoryWatch,
        expect_workers,
        footprint_reader,
        listen_for_workers,
    )
    from loadertune.guards._process_end import end
    from loadertune.guards._trial_stop import trial_guards
    from loadertune.guards._worker_tether import die_with_parent, tether

__getattr__ = lazy_package(__name__, __file__)
