"""The sweep loop: ask Optuna, run the trial in its own process, tell Optuna, record in MLflow.

Skipped by Hydra's plugin scanner (leading underscore), so torch, Optuna and MLflow load only
when a sweep actually runs. The wings it calls: ``plan`` (values <-> overrides, the guess and
the baselines: what to measure next), ``study`` (storage, resume, slots), ``trial`` (the trial
process and its outcome), ``verdict`` (the verdict), ``record`` (what is kept and shown).
"""

from __future__ import annotations

import errno
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from omegaconf import OmegaConf
from optuna.trial import TrialState

from loadertune.checks import HostBusy, timing_lock
from loadertune.errors import ConfigError, ExitStatus, status_of
from loadertune.machine import memory_budget_bytes
from loadertune.record import (
    RECURRING,
    Reason,
    StoreUnavailable,
    bound_tracking_retries,
    describe_os_error,
    failed_status,
    is_disk_full,
    says_disk_full,
)

from .._keys import Results, StudyAttr, TrialAttr
from ..plan import _ceiling, _guess
from ..plan._samplers import create_pruner, create_sampler
from ..plan._sweep_plan import Composer, SweepPlan, make_plan
from ..record import _console
from ..record._mlflow_runs import SweepRecorder, results_yaml, write_results
from ..record._store_ahead import make_store_ahead
from ..study import _hosts, _storage
from ..study._study_file import StudyFile, StudyLost, store_failure
from ..trial._busy_machine import BusyPolicy
from ..trial._measure import Measurer
from ..trial._outcome import Answer, answer_trial, tell_and_record
from ..verdict._rounds import VerdictRun
from ._enough import forget_stop, nothing_left
from ._halt import INFRA, check_stores, fail, show_first_error
from ._next import NextTrial, search_window, unused_window_keys
from ._repair import close_dead_sweeps, queue_baselines, resumed

if TYPE_CHECKING:
    from collections.abc import Callable

    from hydra.types import HydraContext, TaskFunction
    from omegaconf import DictConfig

    from ..config import SweepSettings


VERDICT_STARTED, VERDICT_GIVEN = "started", "given"


@dataclass
class _Session:
    """What one run of the loop holds: the study, and where results go and are shown."""

    plan: SweepPlan
    study: optuna.Study
    recorder: SweepRecorder
    view: _console.SweepView
    slots: _storage.Slots
    budget: _storage.Budget
    next: NextTrial  # what to measure next: the baselines' rungs, the walk, the steering
    study_file: StudyFile  # the SQLite file the study was opened on, watched


class SweepEngine:
    """Runs a study one trial at a time; the only writer to Optuna and MLflow."""

    def __init__(
        self,
        settings: SweepSettings,
        hydra_context: HydraContext,
        task_function: TaskFunction,
        config: DictConfig,
    ) -> None:
        self.settings = settings
        self.compose = Composer(hydra_context, config)
        self.task_function = task_function
        self.parent_run_id: str | None = None
        self._stop_requested = False
        self.memory_budget = 0
        self.lock_mode = "wait"
        self.results: dict[str, Any] = {}  # optimization_results.yaml, once written
        self.store_made: Callable[[], None] = lambda: None  # waits for make_store_ahead's

    def _on_sigint(self, signum: int, frame: Any) -> None:
        """Ctrl-C: finish the current trial's record, then stop (a second one stops now)."""
        if self._stop_requested:
            raise KeyboardInterrupt
        self._stop_requested = True

    def sweep(self, arguments: list[str]) -> None:
        """Run the sweep here; how it ended is its exit status (:mod:`loadertune.errors`):
        bad input and unusable stores end it with one line before anything runs."""
        s = self.settings
        self.store_made = make_store_ahead(self.compose.config)  # beside torch's import
        try:
            plan = make_plan(s, self.compose, arguments)
            sampler = create_sampler(s.sampler, plan.space)
            pruner = create_pruner(s.pruner)
        except (ConfigError, ValueError, ImportError) as exc:
            fail(str(exc))
        self.lock_mode = "off" if s.allow_parallel_trials else s.host_lock
        bound_tracking_retries()  # a server lost mid-sweep fails a write in seconds
        check_stores(plan, self.lock_mode)
        study = self._open(plan, sampler, pruner)
        try:
            with timing_lock(f"a sweep of study '{plan.study_name}'", self.lock_mode):
                ending = self._run(plan, study, sampler)
        except (HostBusy, StoreUnavailable) as exc:  # a store lost mid-sweep: a server, a file
            fail(str(exc), status_of(exc))
        except KeyboardInterrupt as exc:  # Ctrl-C while waiting for the lock: nothing ran
            ending = status_of(exc)
        except Exception as exc:  # a full disk, a failed study database: one line; what was
            out = Path(plan.base.paths.output_root)
            line = store_failure(plan.storage, exc)
            if is_disk_full(exc, out if line or isinstance(exc, OSError) else None):
                fail(describe_os_error(OSError(errno.ENOSPC, str(exc)), out), INFRA)
            if line is not None:  # recorded stays
                fail(line, INFRA)
            raise
        if ending != ExitStatus.OK:
            sys.exit(int(ending))

    def _open(self, plan: SweepPlan, sampler: Any, pruner: Any) -> optuna.Study:
        """The study, created or resumed, once this host may join it; one line if not."""
        s = self.settings
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created" log
        try:
            study = _storage.open_study(plan.storage, plan.study_name, s.direction, sampler, pruner)
        except Exception as exc:  # any storage failure: one line, nothing run
            line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            fail(
                f"hydra.sweeper.storage={plan.storage}: cannot open the study ({line}). "
                "Fix: check the URL, the server and its driver",
                INFRA,
            )
        try:
            joined = _hosts.admit(study, _hosts.fingerprint(), s.force_fingerprint)
        except ConfigError as exc:
            fail(str(exc))
        if joined:
            print(f"loadertune: warning: {joined}", file=sys.stderr)
        conflict = _storage.space_conflict(study, plan.space)
        if conflict:
            fail(conflict)
        return study

    # ---- the loop -----------------------------------------------------------------------

    def _start(self, plan: SweepPlan, study: optuna.Study, sampler: Any) -> _Session:
        """Resume or begin the study: orphans failed, baselines queued, the range restored."""
        s = self.settings
        _console.quiet_libraries()
        orphans = _storage.fail_orphaned_trials(study)
        requeued = queue_baselines(study, plan.space, sampler, plan.base.trial.nproc_per_node)
        ranged = _guess.restore_range(study, plan, s.guess_range)
        dropped = _storage.drop_out_of_range(study, plan.baseline_space())
        plan.sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.compose.config, plan.sweep_dir / "multirun.yaml")
        budget = _storage.Budget.of(s.n_trials, s.max_trials_total, s.count_trials, study)
        sampler_name = str(s.sampler.get("_target_", "")).rsplit(".", 1)[-1]
        self.store_made()  # a fresh store's tables, made while the sweep started
        recorder = SweepRecorder(
            plan.base.tracking, plan.base.paths.output_root, study, plan.storage, sampler_name
        )
        view = _console.SweepView(study, budget.shown, plan, orphans)
        if ranged:
            view.note(ranged)
        if (unused := unused_window_keys(plan, s)) is not None:
            view.note(unused)
        if dropped:
            view.note(
                f"{len(dropped)} queued trial(s) lie outside the range searched now and are "
                f"dropped (not counted): {'; '.join(dropped)}"
            )
        recorder.record_orphans(study, orphans)  # before resumed() adds what MLflow lacks
        for line in resumed(study, requeued, recorder, locked=self.lock_mode != "off"):
            view.note(line)
        self.memory_budget = memory_budget_bytes(s.memory_budget_mb)
        busy = BusyPolicy(s.busy, float(s.busy_wait_s), float(s.busy_cpu_percent), view.note)
        self.measure = Measurer(
            s,
            self.compose,
            self.task_function,
            busy,
            self.memory_budget,
            lambda: self._stop_requested,
        )
        busy.at_start()
        self.parent_run_id = recorder.parent_id
        slots = _storage.Slots(
            study,
            budget.total,
            stopped=lambda: self._stop_requested,
            on_lost=lambda lost: recorder.record_orphans(study, lost),
            note=view.note,
        )
        upcoming = NextTrial(
            study, plan, s, budget, view.note, self.memory_budget / 2**20, view.steered
        )
        watched = StudyFile.of(plan.storage)
        return _Session(plan, study, recorder, view, slots, budget, upcoming, watched)

    def _run(self, plan: SweepPlan, study: optuna.Study, sampler: Any) -> ExitStatus:
        """Search, then the verdict; how the sweep ended (see :mod:`loadertune.errors`)."""
        session = self._start(plan, study, sampler)
        status, ending = "FINISHED", ExitStatus.NO_RESULT
        study_failed = False  # the study's store failed: it holds what it committed, no more
        previous_handler = signal.signal(signal.SIGINT, self._on_sigint)
        try:
            if study.user_attrs.get(StudyAttr.VERDICT) == VERDICT_STARTED:
                session.view.note(
                    "the last sweep of this study stopped during its verdict: finishing the "
                    "verdict now, before any new trial"
                )
            else:
                status, ending = self._search(session, sampler)
            if status == "FINISHED" and not self._stop_requested:
                ending = self._verdict_ending(session)
            session.study_file.check()
        except KeyboardInterrupt:
            self._stop_requested = True
        except BaseException as exc:  # a store failed, or the sweep's own error: no FINISHED
            status = "FAILED"
            study_failed = isinstance(exc, StudyLost) or bool(store_failure(plan.storage, exc))
            if study_failed:  # a file deleted or replaced says so (SQLite refuses its writes)
                session.study_file.check()
            raise
        finally:
            session.slots.close()
            signal.signal(signal.SIGINT, previous_handler)
            if self._stop_requested:
                status, ending = "KILLED", ExitStatus.INTERRUPTED
                session.view.note("interrupted: the sweep stops; every finished trial is recorded")
            self._finish(session, status, study_failed)
        return ending

    def _verdict_ending(self, session: _Session) -> ExitStatus:
        """OK once a recommendation was made (or, with ``verdict_repeats=0``, once a trial
        completed); NO_RESULT when no trial measured anything to recommend."""
        given = self._give_verdict(session)
        if given or self._stop_requested:
            return ExitStatus.OK
        complete = session.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if self.settings.verdict_repeats <= 0 and complete:
            return ExitStatus.OK
        session.view.note("no trial completed: there is nothing to recommend (exit status 3)")
        return ExitStatus.NO_RESULT

    def _search(self, session: _Session, sampler: Any) -> tuple[str, ExitStatus]:
        """Run trials until the budget, the grid or a stop ends it; the parent run's status
        and, when the search itself failed, the exit status."""
        s, study, view = self.settings, session.study, session.view
        ran = failed = in_a_row = 0
        errors_shown = False
        bugs: list[str] = []
        forget_stop(study)  # a stop an earlier invocation made is not this one's
        while session.budget.allows(ran) and not self._stop_requested:
            if hasattr(sampler, "is_exhausted") and sampler.is_exhausted(study):
                view.note("the grid is covered: every point has been measured")
                break
            trial = session.slots.next()
            if trial is None:
                if not self._stop_requested:
                    view.note(f"the study holds its {session.budget.total} trials")
                break
            answer = self._answer(session, trial)
            tell_and_record(study, answer, session.recorder, session.view, ran + 1)
            session.study_file.check()  # still the study's file: else stop, nothing lost
            if answer.measured and answer.error and not errors_shown:
                errors_shown = show_first_error(view, answer)
            if answer.error and says_disk_full(answer.error):  # not the setting's fault
                view.note("stopping: a disk is full (the trial's error says so; see above)")
                return "FAILED", INFRA
            if answer.reason == Reason.INTERRUPTED:
                break
            # A repeat is answered from an earlier measurement: it does not use up n_trials.
            ran += answer.repeat_of is None
            in_a_row = in_a_row + 1 if answer.repeat_of is not None else 0
            failed += answer.state == TrialState.FAIL
            session.next.after(answer, ran, in_a_row)
            done = nothing_left(study, session.plan, s, sampler, in_a_row)
            if done:
                view.note(done)
                break
            if answer.measured:
                bugs.append(answer.signature() if answer.reason in RECURRING else "")
            if len(bugs) >= 2 and bugs[0] and bugs[:2] == [bugs[0]] * 2 and answer.reason:
                view.user_bug(answer.error or "", Reason(answer.reason))
                return "FAILED", failed_status(Reason(answer.reason))
            if failed and failed / max(ran, 1) > s.max_failure_rate:
                view.note(
                    f"stopping: {failed} of {ran} trials failed, above "
                    f"hydra.sweeper.max_failure_rate={s.max_failure_rate}"
                )
                return "FAILED", ExitStatus.NO_RESULT
        return "FINISHED", ExitStatus.OK

    def _finish(self, session: _Session, status: str, study_failed: bool = False) -> None:
        """Write the results and end the parent run, whatever stopped the sweep; with the
        study's store failed, only end the run: nothing claims what the study did not keep."""
        study, plan = session.study, session.plan
        self.measure.busy.at_end()
        if study_failed:
            session.recorder.abort(status)
            return
        close_dead_sweeps(session.recorder, study.study_name, session.view.note)
        try:
            results = results_yaml(study, plan.storage, session.recorder.recommended)
        except Exception:  # the study cannot be read back (its store failed): no results
            session.recorder.abort("FAILED")
            raise
        write_results(plan.sweep_dir, results)
        self.results = results
        if session.recorder.lost:
            pass  # nothing more to write there: the sweep ends with the server's loss
        elif results.get(Results.BEST_VALUE) is not None:
            session.recorder.finish(study, plan.sweep_dir, results, status)
        else:
            session.recorder.abort(status)
        session.view.final(results, plan.sweep_dir, session.recorder.landing())

    def _answer(self, session: _Session, trial: optuna.Trial) -> Answer:
        """Answer a claimed trial: refused, repeated, or measured."""
        if self.parent_run_id:
            trial.set_user_attr(TrialAttr.PARENT_RUN, self.parent_run_id)
        return answer_trial(
            session.study,
            trial,
            session.plan,
            self.compose,
            self.measure,
            self.settings.custom_search_space,
            search_window(self.settings),
        )

    def _give_verdict(self, session: _Session) -> bool:
        """Re-measure the best settings and the baselines interleaved; record and show it.
        True once a recommendation was made."""
        s = self.settings
        if s.verdict_repeats <= 0:
            return False
        session.study.set_user_attr(StudyAttr.VERDICT, VERDICT_STARTED)
        verdict = VerdictRun(
            session.study,
            session.plan,
            measure=self.measure.again,
            config_of=self.compose.run_config,
            stopped=lambda: self._stop_requested,
            note=session.view.note,
            memory_budget_mb=self.memory_budget / 2**20,
            train_hours=s.train_hours,
        ).run(s.verdict_top, s.verdict_repeats)
        if not self._stop_requested:  # an interrupted verdict is finished on the next start
            session.study.set_user_attr(StudyAttr.VERDICT, VERDICT_GIVEN)
        if verdict is None:
            return False
        guess = _guess.study_guess(session.study)
        session.recorder.log_verdict(verdict, session.plan.sweep_dir, guess)
        session.view.verdict(
            verdict.rec,
            verdict.cands,
            verdict.assurance,
            verdict.loader_file,
            guess,
            _guess.study_range(session.study),
            s.verdict_repeats,
            _ceiling.stopped_why(session.study),
        )
        return True
