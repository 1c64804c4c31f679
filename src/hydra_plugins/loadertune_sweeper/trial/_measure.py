"""One timed window in its own trial process, with the machine's other work in view.

The engine's way to measure: the limits a trial process runs under, the pruner's reports
while it runs, and what ``hydra.sweeper.busy`` asks for around the window (wait for quiet
before it, measure once more a window other work disturbed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loadertune.config import RunConfig, to_run_config
from loadertune.measure import summarize

from .._keys import TrialAttr
from ..plan._sweep_plan import Composer
from ._busy_machine import BusyPolicy
from ._noise_pruner import block_ms
from ._trial_process import Limits, TrialOutcome, run_trial_process
from ._warm_parent import warm_parent

if TYPE_CHECKING:
    import optuna
    from hydra.types import TaskFunction
    from omegaconf import DictConfig

    from loadertune.record import TrialResult

    from ..config import SweepSettings


@dataclass
class Measurer:
    """Runs trial processes for one sweep; the only place one is started."""

    settings: SweepSettings
    compose: Composer
    task_function: TaskFunction
    busy: BusyPolicy
    memory_budget: int  # bytes, for the trial's process tree
    stopped: Callable[[], bool]

    def __call__(
        self, trial: optuna.Trial | None, job_cfg: DictConfig, config: RunConfig
    ) -> TrialOutcome:
        """Measure once (``trial`` gets pruner reports; None: never pruned), and once more
        without the pruner when ``busy=wait`` and other work disturbed the window."""
        what = f"trial {job_cfg.hydra.job.num}" + ("" if trial is not None else " (verdict)")
        self.busy.before_window(self.stopped)
        outcome = self._run(trial, job_cfg, config)
        if outcome.result is not None and self.busy.measure_again(outcome.result):
            self.busy.seen(what, outcome.result)
            self.busy.note(f"busy: other work disturbed {what}; measuring it once more")
            self.busy.before_window(self.stopped)
            again = self._run(None, job_cfg, config)
            if again.result is not None:
                outcome = again
        self.busy.seen(what, outcome.result)
        return outcome

    def again(self, lines: list[str], job_num: int) -> TrialResult | str:
        """One more measurement of a trial's settings, never pruned (for the verdict); when
        it measured nothing, why (:func:`failure_of`)."""
        job_cfg = self.compose(lines, job_num=job_num)
        outcome = self(None, job_cfg, to_run_config(job_cfg))
        return outcome.result if outcome.result is not None else failure_of(outcome)

    def _run(
        self, trial: optuna.Trial | None, job_cfg: DictConfig, config: RunConfig
    ) -> TrialOutcome:
        s = self.settings
        workers = config.loader.num_workers
        kept: list[float] = []

        def on_progress(steps: list[Any]) -> bool:
            if trial is None:
                return False
            blocks = block_ms(steps, workers, s.report_every)
            if len(blocks) != len(kept):  # the noise pruner's input, kept with the trial
                kept[:] = [round(b, 6) for b in blocks]
                trial.set_user_attr(TrialAttr.BLOCK_MS, kept)
            trial.report(summarize(steps, workers).time_per_sample_ms, step=len(steps))
            return trial.should_prune()

        warm_parent(config)  # imported here once, not in every trial process
        limits = Limits(
            wall_s=s.trial_timeout_s or config.trial.time_limit_s + s.startup_timeout_s,
            stall_s=s.stall_timeout_s,
            startup_s=s.startup_timeout_s,
            memory_bytes=self.memory_budget,
        )
        return run_trial_process(
            self.compose.hydra_context,
            self.task_function,
            job_cfg,
            on_progress,
            s.report_every,
            limits,
            self.stopped,
        )


def failure_of(outcome: TrialOutcome) -> str:
    """Why a trial process measured nothing, in one line: its reason (``timeout``,
    ``memory_budget``, ``crashed``, ...) and the last line of its error."""
    reason = str(outcome.reason or outcome.status)
    last = (outcome.error or "").strip().splitlines()[-1:]
    return f"{reason}: {last[0][:200]}" if last else reason
