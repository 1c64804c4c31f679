"""The sweep's model-based first guess at ``num_workers``: from the default trial, and the
range it sets.

With ``num_workers=0`` the training process loads every batch itself, so the default trial
measures both costs apart: the wait for a batch is the load time of one batch, and the
compute phase is the model step; :func:`loadertune.decision.guess` turns them into a number
of workers. The guess is enqueued as an early trial, and the verdict reports it against what
was measured.

The guess also sets the ``num_workers`` range the sampler searches (:func:`workers_range`):
wider than written when loading waits on I/O and needs more workers than the CPU-derived
bound, narrower when a few workers already hide loading behind the step. Widening stops at
the most workers the machine holds for this workload's batches
(:func:`loadertune.checks._preflight.worker_cap`: memory, /dev/shm, descriptors, shards), never at a
multiple of the CPUs: workers that wait on reads cost none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from optuna.distributions import IntDistribution

from loadertune.checks import Batch, worker_cap, worker_mb
from loadertune.config import DEFAULT_PREFETCH_FACTOR
from loadertune.decision import Bound, Guess, guess
from loadertune.machine import cpus_per_rank

from .._keys import StudyAttr, TrialAttr
from . import _baselines
from ._baselines import Role

if TYPE_CHECKING:
    import optuna

    from loadertune.record import TrialResult

    from ._sweep_plan import SweepPlan


def workers_range(g: Guess, low: int, high: int, step: int = 1) -> tuple[int, int]:
    """The ``num_workers`` range ``(low, high)`` to search once the guess is known.

    - Wider, when the guess needs more workers than ``high`` and nothing but the range
      stopped it (loading waits on I/O, so workers beyond the CPUs still help): up to 1.5 x
      the guess, within the CPU and memory bounds and the most workers the machine holds
      (the guess's ``ceiling``), so the search can see both sides of it.
    - Narrower, when a few workers hide loading behind the step: up to 2 x the guess, which
      still brackets it, instead of spending trials on settings that can only cost more.
    - Otherwise (the CPUs or memory bound the guess) as written.

    ``low`` never moves: 0 workers is the default and stays a point of the search.
    """

    def on_step(value: int) -> int:
        return low + ((value - low) // step) * step

    if g.workers > high:
        wider = on_step(min(g.ceiling, math.ceil(1.5 * g.workers)))
        return low, max(high, wider)
    if g.bound == Bound.HIDES_LOADING and 2 * g.workers < high:
        narrower = on_step(2 * g.workers)
        if narrower >= max(g.workers, low + step):
            return low, narrower
    return low, high


def from_default_trial(
    result: TrialResult | None, memory_budget_mb: float, max_workers: int, nproc_per_node: int = 1
) -> Guess | None:
    """The guess from a ``num_workers=0`` trial's result, or None if it cannot tell.

    With 0 workers the training process loads every batch itself: its CPU time while it
    waits for a batch is loading's (``wait_cpu_cores``), its CPU time while it steps is the
    step's (``step_cpu_cores``), both measured per step with the process's CPU clock. Each
    worker holds the memory the pre-flight checks count
    (:func:`loadertune.checks._preflight.worker_mb`: its own and two batches in flight, PyTorch's
    ``prefetch_factor``). The load is the mean wait (a median hides rare slow reads, which set
    the rate as much as the quick ones); its p99 is the tail the workers in flight must cover.
    """
    if result is None or result.effective_loader.num_workers != 0:
        return None
    s = result.summary
    return guess(
        load_ms_per_batch=s.data_wait_fraction * s.window_s * 1000.0 / max(s.steps, 1),
        tail_load_ms_per_batch=s.data_wait_ms_p99,
        prefetch_factor=DEFAULT_PREFETCH_FACTOR,
        step_ms=s.compute_ms_mean + s.copy_ms_mean,
        batch_size=int(result.effective_loader.batch_size or 1),
        cpu_share_of_loading=max(0.0, s.wait_cpu_cores),
        usable_cpus=cpus_per_rank(nproc_per_node, int(result.machine.get("usable_cpus", 1))),
        memory_per_worker_mb=worker_mb(_batch(result), DEFAULT_PREFETCH_FACTOR),
        memory_budget_mb=memory_budget_mb,
        max_workers=max_workers,
        step_cpu_cores=max(0.0, s.step_cpu_cores),
    )


def _batch(result: TrialResult) -> Batch:
    """The batch each worker keeps in flight, as the trial's pre-flight checks read it."""
    return Batch(result.batch_bytes, result.batch_tensors)


@dataclass(frozen=True)
class WorkersRange:
    """The ``num_workers`` range the guess set: the key, the range as written, the new high."""

    key: str
    written: tuple[int, int, int]  # low, high, step
    searched: int

    @property
    def widened(self) -> bool:
        return self.searched > self.written[1]

    def as_attrs(self) -> dict[str, Any]:
        return {"key": self.key, "written": list(self.written), "searched": self.searched}

    @classmethod
    def from_attrs(cls, attrs: dict[str, Any] | None) -> WorkersRange | None:
        if not attrs:
            return None
        low, high, step = attrs["written"]
        return cls(attrs["key"], (int(low), int(high), int(step)), int(attrs["searched"]))

    def sentence(self) -> str:
        """What moved, and why."""
        low, high, _ = self.written
        how = "widened" if self.widened else "narrowed"
        why = (
            "loading waits on I/O, so workers beyond the CPUs still help"
            if self.widened
            else "a few workers already hide loading behind the step"
        )
        return (
            f"the model-based guess {how} the {self.key.lstrip('+')} range from {low}..{high} "
            f"to {low}..{self.searched}: {why} (hydra.sweeper.guess_range=false keeps it as "
            "written)"
        )


def after_default_trial(
    study: optuna.Study,
    plan: SweepPlan,
    result: TrialResult,
    memory_budget_mb: float,
    guess_range: bool,
) -> list[str]:
    """Guess from the default trial, re-range ``num_workers``, enqueue the guess next.

    Returns what a person should be told (the range that moved, if it did).
    """
    wkey = plan.workers_key()
    if wkey is None:
        return []
    dist = plan.space[wkey]
    may_widen = guess_range and isinstance(dist, IntDistribution)
    ranks = plan.base.trial.nproc_per_node
    most = worker_cap(ranks, _batch(result), DEFAULT_PREFETCH_FACTOR, plan.shards).workers
    cap = most if may_widen else min(most, _baselines.upper(dist))
    g = from_default_trial(result, memory_budget_mb, max(cap, 1), ranks)
    if g is None:
        return []
    study.set_user_attr(StudyAttr.GUESS, g.as_attrs())
    messages = []
    if may_widen and isinstance(dist, IntDistribution):
        _, new_high = workers_range(g, dist.low, dist.high, dist.step)
        if new_high != dist.high:
            moved = WorkersRange(wkey, (dist.low, dist.high, dist.step), new_high)
            study.set_user_attr(StudyAttr.WORKERS_RANGE, moved.as_attrs())
            message = restore_range(study, plan, guess_range)
            messages += [message] if message else []
    params = _baselines.params_for(plan.space, _baselines.nearest(plan.space[wkey], g.workers))
    if params is not None:
        study.enqueue_trial(params, user_attrs={TrialAttr.BASELINE: Role.MODEL_GUESS.value})
    return messages


def restore_range(study: optuna.Study, plan: SweepPlan, guess_range: bool) -> str | None:
    """Search the ``num_workers`` range the guess set, if the written range is unchanged."""
    ranged = WorkersRange.from_attrs(study.user_attrs.get(StudyAttr.WORKERS_RANGE))
    if ranged is None or not guess_range:
        return None
    low, high, step = ranged.written
    if plan.written.get(ranged.key) != IntDistribution(low, high, step=step):
        return None  # the command line changed the range since: it wins
    plan.space[ranged.key] = IntDistribution(low, ranged.searched, step=step)
    return ranged.sentence()


def study_guess(study: optuna.Study) -> Guess | None:
    """The guess a study holds."""
    return Guess.from_attrs(study.user_attrs.get(StudyAttr.GUESS))


def study_range(study: optuna.Study) -> WorkersRange | None:
    """The range the guess set in a study."""
    return WorkersRange.from_attrs(study.user_attrs.get(StudyAttr.WORKERS_RANGE))
