"""A trial of several ranks on one node (``trial.nproc_per_node`` > 1), started as torchrun does.

Each rank is a process of PyTorch's own elastic launcher with a process group (gloo on the
CPU, nccl with one CUDA device per rank), its own DataLoader over its share of the data, and
the model step paced as DDP paces it; the trial's figure is the node's (:mod:`.node`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadertune._lazy import lazy_package

__all__ = ["rank_main", "run_ranks"]

if TYPE_CHECKING:
    from loadertune.ranks.launch import run_ranks
    from loadertune.ranks.rank import rank_main

__getattr__ = lazy_package(__name__, __file__)
