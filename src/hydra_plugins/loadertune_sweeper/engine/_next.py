"""What a sweep measures next, and for how long.

After each trial the loop asks :class:`NextTrial` what to queue: the doubling path's next
rung (geometric steps up to the range's top), the model-based guess after the default
trial, then the count halfway to the fewest workers as fast as the most (bisection, for a
wide range: ``plan._refine``) and the prefetch depth at that count, the next setting of a
space small enough to walk, or, when the sampler keeps proposing settings already answered,
the unanswered setting nearest the one it keeps asking for. :func:`search_window` says how long
a search trial times (``hydra.sweeper.search_window``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loadertune.config import plain_key

from .. import _optuna_private
from .._keys import TrialAttr
from ..plan import _baselines, _enumerate, _guess, _refine
from ..plan._baselines import Role
from ..study import _storage
from ..verdict._rounds import ROUND_WINDOW

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from ..config import SweepSettings
    from ..plan._sweep_plan import SweepPlan
    from ..trial._outcome import Answer

STEER_AFTER = 2  # proposals of answered settings in a row before the nearest new one is queued
_WINDOW_KEYS = ("trial.precision", "trial.max_steps")  # search_window=steps sets them aside


def search_window(s: SweepSettings) -> tuple[str, ...]:
    """The overrides that set how long a search trial times (``hydra.sweeper.search_window``):
    with ``steps`` and a verdict to follow, exactly ``trial.steps`` timed steps, as a verdict
    round (``verdict._rounds.ROUND_WINDOW``); else none, the trial's own rule."""
    if s.search_window == "steps" and s.verdict_repeats > 0:
        return tuple(ROUND_WINDOW)
    return ()


def unused_window_keys(plan: SweepPlan, s: SweepSettings) -> str | None:
    """A note when the command line fixes ``trial.precision`` or ``trial.max_steps`` for a
    sweep whose search trials time ``trial.steps`` steps (so none of them uses it)."""
    ignored = [k for k in plan.fixed if plain_key(k) in _WINDOW_KEYS]
    if not ignored or not search_window(s):
        return None
    return (
        f"{', '.join(ignored)}: used by no search trial, each times trial.steps steps before "
        "the verdict measures the candidates again (hydra.sweeper.search_window=steps); "
        "hydra.sweeper.search_window=precise times each search trial until trial.precision"
    )


@dataclass
class NextTrial:
    """Queues what the study measures next, after each trial of one sweep."""

    study: optuna.Study
    plan: SweepPlan
    settings: SweepSettings
    budget: _storage.Budget
    note: Callable[[str], None]
    memory_budget_mb: float
    steered: Callable[[int], None]  # says: the nearest unanswered setting, not trial n's again
    walking: bool = False  # the space is walked in order of promise (``plan._enumerate``)

    def after(self, answer: Answer, ran: int, in_a_row: int) -> None:
        """After a trial: the doubling path's next rung; after the default, the guess; once
        nothing waits, the count halfway to the fewest sufficient workers; then, in a space
        small enough to walk, its most promising setting not yet answered; after
        :data:`STEER_AFTER` repeats in a row (``in_a_row``), the unanswered setting nearest
        the last. ``ran``: the trials measured so far in this invocation."""
        study, plan = self.study, self.plan
        finished = study.trials[answer.trial.number]
        rung = _baselines.next_rung(study, finished, plan.baseline_space())
        if rung is not None:
            study.enqueue_trial(rung, user_attrs={TrialAttr.BASELINE: Role.DOUBLING.value})
        result = answer.outcome.result if answer.outcome else None
        if _baselines.role_of(finished) == Role.DEFAULT and result is not None:
            for message in _guess.after_default_trial(
                study, plan, result, self.memory_budget_mb, self.settings.guess_range
            ):
                self.note(message)
        if self.settings.custom_search_space or _optuna_private.is_exhaustive(study.sampler):
            return  # the user's own suggestions, or a sampler that covers the space itself
        self._refine(ran)
        self._walk(ran)
        if answer.repeat_of is not None and in_a_row >= STEER_AFTER:
            self._steer(answer.repeat_of)

    def _steer(self, favourite: FrozenTrial) -> None:
        """Queue the unanswered setting nearest the one the sampler keeps proposing
        (``plan._enumerate.nearest_unanswered``): its repeats were answered, and taught it
        nothing new, so the trial goes where it looks rather than where it has looked."""
        setting = _enumerate.nearest_unanswered(self.study, self.plan, favourite.params)
        if setting is None:
            return
        self.steered(favourite.number)
        self.study.enqueue_trial(setting, user_attrs={TrialAttr.STEERED_FROM: favourite.number})

    def _left(self, ran: int) -> int | None:
        """Trials this invocation and the study may still measure (None: no bound)."""
        budget = self.budget
        left = budget.runs - ran if budget.runs is not None else None
        if budget.total is not None:
            total_left = budget.total - _storage.tally(self.study)[0]
            left = total_left if left is None else min(left, total_left)
        return left

    def _refine(self, ran: int) -> None:
        """Queue the count halfway between the fewest workers measured as fast as the most
        and the most measured slower below them, then, at that count, the next prefetch
        depth (``plan._refine``), while trials are left."""
        left = self._left(ran)
        if left is not None and left <= 0:
            return
        for step in (_refine.next_count, _refine.next_depth):
            setting = step(self.study, self.plan)
            if setting is not None:
                self.study.enqueue_trial(setting, user_attrs={TrialAttr.REFINED: True})
                return

    def _walk(self, ran: int) -> None:
        """Queue the next setting of a finite space that has no more unanswered settings
        than trials left (``plan._enumerate``): measured in order of promise, not sampled."""
        study, plan = self.study, self.plan
        left = self._left(ran)
        guess = _guess.study_guess(study)
        center = guess.workers if guess is not None else plan.default_workers
        setting = _enumerate.next_setting(study, plan, left, center)
        if setting is None:
            return
        if not self.walking:
            self.walking = True
            self.note(
                "the space left holds no more settings than the trials left: measuring each "
                "once, nearest the guess first, instead of sampling"
            )
        study.enqueue_trial(setting, user_attrs={TrialAttr.WALKED: True})
