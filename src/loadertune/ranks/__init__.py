"""A trial of several ranks on one node (``trial.nproc_per_node`` > 1), started as torchrun does.

Each rank is a process of PyTorch's own elastic launcher with a process group (gloo on the
CPU, nccl with one CUDA device per rank), its own DataLoader over its share of the data, and
the model step paced as DDP paces it; the trial's figure is the node's (:mod:`.node`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loadertune.config import RunConfig
    from loadertune.measure import StepCallback
    from loadertune.record import TrialResult
    from loadertune.storage import StorageSession


def run_ranks(
    config: RunConfig, store: StorageSession, on_step: StepCallback | None = None
) -> TrialResult:
    """Measure ``config`` with ``trial.nproc_per_node`` ranks (see :mod:`.launch`)."""
    from loadertune.ranks.launch import run_ranks as run

    return run(config, store, on_step)
