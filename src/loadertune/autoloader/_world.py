"""The ranks AutoLoader tunes together: this process alone, or every rank of a process group.

Every collective AutoLoader makes lives here. :class:`World` is one process: each call
returns its own argument, so the driver reads the same with or without torch.distributed.
:class:`Ranks` is the default group of an initialised ``torch.distributed`` job (torchrun,
``srun``, ``mp.spawn``): every rank calls the same collective at the same training step, so a
rank that skipped one would deadlock the next, and the driver calls them only at points every
rank reaches in step (a tuning step, a segment's end, settling).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from loadertune._lazy import dist, torch
from loadertune.machine import local_world_size

T = TypeVar("T")


class World:
    """This process alone: every collective is the identity."""

    rank = 0
    size = 1
    local_size = 1  # ranks sharing this node's CPUs

    def agree(self, why: str) -> str:
        """Why any rank's probe failed in this step, one line ("" when none): here, ``why``."""
        return why

    def gather(self, obj: T) -> list[T]:
        """Every rank's ``obj``, by rank."""
        return [obj]

    def check_same(self, what: str, value: object) -> None:
        """Raise on every rank, naming the ranks, when ``value`` differs between them."""
        values = self.gather(value)
        if any(v != values[0] for v in values):
            each = ", ".join(f"rank {r}: {v}" for r, v in enumerate(values))
            raise RuntimeError(
                f"AutoLoader: the ranks differ in {what} ({each}); build every rank's "
                "AutoLoader with the same arguments and a sampler giving each as many batches"
            )

    def from_root(self, make: Callable[[], T]) -> T:
        """Rank 0's ``make()``, on every rank (only rank 0 calls ``make``)."""
        return make()


class Ranks(World):
    """Every rank of the default ``torch.distributed`` process group."""

    def __init__(self) -> None:
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.local_size = local_world_size(otherwise=self.size)  # no launcher: one node
        nccl = dist.get_backend() == "nccl"  # its collectives take tensors on the rank's GPU
        self._device = torch.device("cuda", torch.cuda.current_device()) if nccl else None

    def agree(self, why: str) -> str:
        """One all-reduce a step while tuning; the reasons are gathered only when one failed."""
        flag = torch.tensor([1 if why else 0], dtype=torch.int32, device=self._device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if not int(flag.item()):
            return ""
        return "; ".join(f"rank {r}: {w}" for r, w in enumerate(self.gather(why)) if w)

    def gather(self, obj: T) -> list[T]:
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj)
        return out

    def from_root(self, make: Callable[[], T]) -> T:
        box: list[Any] = [make() if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=0, device=self._device)
        result: T = box[0]
        return result


def world() -> World:
    """The ranks of the job: an initialised process group of two or more, else this process."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return Ranks()
    return World()
