"""The index plan: each epoch's batches as index lists, and which were delivered (exactly once).

Every probe loader draws its batches from one plan through :class:`PlanSampler` (its
``batch_sampler``), so switching settings mid-epoch hands the next loader exactly the
batches not yet delivered: a closed loader's batches in flight go back to the front of the
queue. The epoch's order is drawn once, at the epoch's start, with the same random draws a
``DataLoader`` makes (its iterator's base seed, then its sampler), so a seeded AutoLoader
yields the batches a seeded ``DataLoader`` would. The RNG state before the draw is kept, so
a checkpoint can replay the epoch's order instead of storing it; so is the epoch a sampler
with ``set_epoch`` (a ``DistributedSampler``) drew it for, which it is set back to.
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from loadertune._lazy import torch


class IndexPlan:
    """One epoch at a time: the batches, the queue still to hand out, and what was delivered."""

    def __init__(self, batch_sampler: Iterable[list[int]], generator: torch.Generator | None):
        self._sampler = batch_sampler
        self._generator = generator
        self.epoch = -1
        self.base_seed = 0  # the draw a DataLoader's iterator makes; seeds the probes' workers
        self.batches: list[list[int]] = []
        self.pending: deque[int] = deque()
        self._delivered = bytearray()
        self.num_delivered = 0
        self._rng: torch.Tensor | None = None
        self._sampler_epoch: int | None = None  # a DistributedSampler's epoch at the draw
        self._starts = 0  # loaders started in this epoch, each with workers seeded anew
        self.skip_next = 0  # batches the next epoch starts after (a framework's resume)

    def begin_epoch(self) -> None:
        """Draw the next epoch's order (a DataLoader's draws, in its order), its first
        ``skip_next`` batches counted as delivered: batches are delivered in the epoch's
        order (a closed loader's go back to the front), so they are the first ones."""
        self.epoch += 1
        self.base_seed = int(
            torch.empty((), dtype=torch.int64).random_(generator=self._generator).item()
        )
        self._rng = self._rng_state()
        self._sampler_epoch = getattr(self._epoch_sampler(), "epoch", None)
        self._set_batches([list(b) for b in self._sampler])
        skip, self.skip_next = min(self.skip_next, len(self.batches)), 0
        for _ in range(skip):
            self.deliver(self.pending.popleft())

    def worker_seeds(self) -> torch.Generator:
        """The generator a loader started now seeds its workers from: the k-th start in the
        epoch from ``base_seed + k``, so no two starts draw the same random streams (a
        ``DataLoader`` starts once an epoch, from a base seed of its own each epoch)."""
        self._starts += 1
        return torch.Generator().manual_seed((self.base_seed + self._starts - 1) % 2**64)

    def _epoch_sampler(self) -> Any:
        """The sampler whose ``set_epoch`` orders the epoch, if it has one."""
        for s in (self._sampler, getattr(self._sampler, "sampler", None)):
            if callable(getattr(s, "set_epoch", None)):
                return s
        return None

    def _rng_state(self) -> torch.Tensor:
        return self._generator.get_state() if self._generator else torch.get_rng_state()

    def _set_batches(self, batches: list[list[int]]) -> None:
        self.batches = batches
        self.pending = deque(range(len(batches)))
        self._delivered = bytearray(len(batches))
        self.num_delivered = 0
        self._starts = 0

    @property
    def done(self) -> bool:
        """Every batch of the epoch was delivered."""
        return self.num_delivered == len(self.batches)

    def take(self) -> int | None:
        """The next batch to hand to a loader (its position in the epoch), or None."""
        return self.pending.popleft() if self.pending else None

    def requeue(self, positions: list[int]) -> None:
        """Put batches a closed loader never delivered back at the front, in their order."""
        for pos in reversed(positions):
            if not self._delivered[pos]:
                self.pending.appendleft(pos)

    def deliver(self, pos: int) -> None:
        """Mark a batch as delivered to the training loop; a second delivery is a bug."""
        if self._delivered[pos]:
            raise RuntimeError(f"batch {pos} of epoch {self.epoch} delivered twice")
        self._delivered[pos] = 1
        self.num_delivered += 1

    def checksum(self) -> int:
        """CRC of the epoch's order, to check a replay drew the same batches."""
        return zlib.crc32(repr(self.batches).encode())

    def state(self) -> dict[str, Any]:
        """The epoch, the RNG state its order was drawn from, and the delivered batches."""
        return {
            "epoch": self.epoch,
            "base_seed": self.base_seed,
            "rng_state": self._rng,
            "generator_state": self._generator.get_state() if self._generator else None,
            "crc": self.checksum(),
            "sampler_epoch": self._sampler_epoch,
            "delivered": ranges(i for i, d in enumerate(self._delivered) if d),
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Replay the epoch's order from its RNG state and mark what was delivered.

        Raises:
            ValueError: when the sampler does not draw the same order again (a sampler with
                randomness of its own, neither the ``generator`` nor torch's global RNG).
        """
        self.epoch, self.base_seed = state["epoch"], state["base_seed"]
        self._rng = state["rng_state"]
        if self.epoch < 0 or self._rng is None:
            return
        self._sampler_epoch = state.get("sampler_epoch")
        if self._sampler_epoch is not None and self._epoch_sampler() is not None:
            self._epoch_sampler().set_epoch(self._sampler_epoch)
        with torch.random.fork_rng(devices=[]):
            if self._generator is not None:
                self._generator.set_state(self._rng)
            else:
                torch.set_rng_state(self._rng)
            self._set_batches([list(b) for b in self._sampler])
        if self._generator is not None and state["generator_state"] is not None:
            self._generator.set_state(state["generator_state"])
        if self.checksum() != state["crc"]:
            raise ValueError(self._replay_error())
        for start, stop in state["delivered"]:
            for pos in range(start, stop):
                self.deliver(pos)
        self.pending = deque(p for p in self.pending if not self._delivered[p])

    def _replay_error(self) -> str:
        """Why the replayed order differs, and the fix: a sampler ordered by ``set_epoch`` (a
        ``DistributedSampler``) whose epoch the checkpoint could not restore, or another draw."""
        head = (
            "AutoLoader.load_state_dict: the sampler drew a different order for epoch "
            f"{self.epoch} than when the checkpoint was written"
        )
        sampler = self._epoch_sampler()
        if sampler is not None:
            kind = type(sampler).__name__
            now = getattr(sampler, "epoch", None)
            saved = "" if self._sampler_epoch is None else f" (saved: {self._sampler_epoch})"
            return (
                f"{head}. The {kind} orders each epoch by its set_epoch(epoch){saved}, now at "
                f"{'an unknown epoch' if now is None else now}. Fix: call "
                "loader.sampler.set_epoch(<the epoch the checkpoint was written in>) before "
                "load_state_dict, and build it with the same seed, num_replicas and rank"
            )
        return (
            f"{head}; pass the same dataset, sampler and generator as when the checkpoint was "
            "written (a custom sampler must draw from `generator` or torch's global RNG)"
        )


def ranges(positions: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted positions as ``[start, stop)`` runs: a few pairs for an epoch delivered in order."""
    runs: list[tuple[int, int]] = []
    for pos in positions:
        if runs and runs[-1][1] == pos:
            runs[-1] = (runs[-1][0], pos + 1)
        else:
            runs.append((pos, pos + 1))
    return runs


class PlanSampler:
    """A probe loader's ``batch_sampler``: the plan's queue, remembering what it handed out.

    A DataLoader keeps its batches in order (``in_order=True``), so the k-th batch it
    delivers is the k-th this sampler handed out: the rest are in flight when it closes.
    """

    def __init__(self, plan: IndexPlan) -> None:
        self.plan = plan
        self.handed: list[int] = []  # positions, in the order handed out
        self.delivered = 0  # how many of ``handed`` reached the training loop
        self.open = True  # False: the probe is draining, hand out nothing more

    def __iter__(self) -> Iterator[list[int]]:
        while self.open and (pos := self.plan.take()) is not None:
            self.handed.append(pos)
            yield self.plan.batches[pos]

    def __len__(self) -> int:
        return len(self.plan.pending)

    @property
    def outstanding(self) -> int:
        """Batches handed out and not yet delivered: in flight in the loader."""
        return len(self.handed) - self.delivered

    def deliver_next(self) -> None:
        """The loader delivered its next batch: mark it in the plan."""
        self.plan.deliver(self.handed[self.delivered])
        self.delivered += 1

    def release(self) -> None:
        """The loader is closed: its undelivered batches go back to the plan's queue."""
        self.plan.requeue(self.handed[self.delivered :])
        self.handed, self.delivered = [], 0
