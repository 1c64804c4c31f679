"""Pruning that survives noise: a trial is stopped only when its measured interval lies above
the best trial's by more than a tolerance.

The median pruner compares one number, a trial's time per sample so far, with the median of
earlier trials at the same step: on a shared machine a 2 s window wanders by a few percent,
so it prunes settings within 1% of the best. Here each trial's timed steps are cut into
blocks of whole arrival cycles (``block_ms``, kept with the trial at every report), and the
distribution-free interval around the median block (``loadertune.measure._paired_stats``) is
compared: the running trial is pruned only when even the low end of its interval is slower than the
high end of the best complete trial's by more than ``tolerance``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import optuna
from optuna.pruners import BasePruner
from optuna.trial import FrozenTrial, TrialState

from loadertune.measure import median_interval, summarize

from .._keys import TrialAttr
from .._optuna_schemas import IntervalPrunerConfig

if TYPE_CHECKING:
    from loadertune.measure import StepRecord

MIN_BLOCK_STEPS = 2  # a block is at least this many steps, and whole arrival cycles
_DEFAULT = IntervalPrunerConfig()  # the defaults are the config schema's, written there once


def block_ms(steps: Sequence[StepRecord], num_workers: int, report_every: int) -> list[float]:
    """Time per sample (ms) of consecutive blocks of ``steps``: each at least
    ``report_every`` steps and two arrival cycles (``2 * num_workers`` steps: with workers,
    batches arrive in bursts), the last partial block left out."""

    size = max(report_every, MIN_BLOCK_STEPS, 2 * num_workers)
    out = []
    for start in range(0, len(steps) - size + 1, size):
        block = list(steps[start : start + size])
        out.append(summarize(block, num_workers).time_per_sample_ms)
    return out


def hopeless(blocks: Sequence[float], best: Sequence[float], tolerance: float) -> bool:
    """Whether the running trial's interval (``blocks``) lies above the best's by more than
    ``tolerance``: its low end over the best's high end, less 1."""
    low, _ = median_interval(blocks)
    _, best_high = median_interval(best)
    return low > best_high * (1.0 + tolerance)


class IntervalPruner(BasePruner):
    """Prune a trial only when its measured interval is above the best's beyond ``tolerance``.

    Args:
        tolerance: How much slower than the best's interval (0.05: 5%) the trial's interval
            must lie before it is pruned.
        n_startup_trials: Complete trials (measured, not answered from another) needed first.
        n_warmup_steps: Timed steps of each trial that are never pruned.
        min_blocks: Blocks of the running trial its interval needs (3: the whole range of the
            three, a 75% interval of their median).
    """

    def __init__(
        self,
        tolerance: float = _DEFAULT.tolerance,
        n_startup_trials: int = _DEFAULT.n_startup_trials,
        n_warmup_steps: int = _DEFAULT.n_warmup_steps,
        min_blocks: int = 3,
    ) -> None:
        if tolerance < 0 or n_startup_trials < 1 or n_warmup_steps < 0 or min_blocks < 3:
            raise ValueError(
                "hydra.sweeper.pruner: tolerance >= 0, n_startup_trials >= 1, "
                "n_warmup_steps >= 0 and min_blocks >= 3, got "
                f"{tolerance}, {n_startup_trials}, {n_warmup_steps}, {min_blocks}"
            )
        self.tolerance = tolerance
        self.n_startup_trials = n_startup_trials
        self.n_warmup_steps = n_warmup_steps
        self.min_blocks = min_blocks
        self._best: tuple[tuple[str, int], tuple[int, list[float]] | None] | None = None

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        step = trial.last_step
        blocks = trial.user_attrs.get(TrialAttr.BLOCK_MS) or []
        if step is None or step < self.n_warmup_steps or len(blocks) < self.min_blocks:
            return False
        best = self._best_for(study, trial.number)
        if best is None or best[0] < self.n_startup_trials:
            return False
        return hopeless(blocks, best[1], self.tolerance)

    def _best_for(self, study: optuna.Study, number: int) -> tuple[int, list[float]] | None:
        """The best measured trial as the running trial ``number`` first asked for it.

        Read once per running trial, not at every report: reading every complete trial from
        the storage was half of a report's cost in the sweep process, beside the trial it
        times. A trial another sweep completes meanwhile counts from the next trial on; until
        then the running one is judged against the best it first saw.
        """
        key = (study.study_name, number)
        if self._best is None or self._best[0] != key:
            complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            self._best = (key, _best_measured(complete))
        return self._best[1]


def _best_measured(complete: Sequence[FrozenTrial]) -> tuple[int, list[float]] | None:
    """(how many complete trials were measured, the fastest one's blocks), or None."""
    measured = [
        t
        for t in complete
        if t.value is not None
        and t.user_attrs.get(TrialAttr.REPEAT_OF) is None
        and len(t.user_attrs.get(TrialAttr.BLOCK_MS) or []) >= 1
    ]
    if not measured:
        return None
    fastest = min(measured, key=lambda t: float(t.value or 0.0))
    return len(measured), list(fastest.user_attrs[TrialAttr.BLOCK_MS])
