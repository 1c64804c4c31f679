"""The sweep loop: ask Optuna, run the trial in its own process, tell Optuna, record in MLflow.

Skipped by Hydra's plugin scanner (leading underscore), so torch, Optuna and MLflow load only
when a sweep actually runs.
"""

from __future__ import annotations

import logging
import signal
import statistics
import sys
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import optuna
import psutil
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import TrialState

from loadertune.config import RunConfig, to_run_config
from loadertune.errors import ConfigError
from loadertune.failures import INFEASIBLE
from loadertune.machine import usable_cpus
from loadertune.search_rules import (
    NEEDS_WORKERS,
    applies,
    effective_key,
    plain_key,
    suggestion_order,
)

from . import _baselines, _console, _fanout, _fleet, _guess, _study, _verdict
from ._record import PARENT_RUN, SweepRecorder, results_yaml, write_results
from ._runner import Limits, TrialOutcome, run_trial_process
from ._samplers import create_pruner, create_sampler
from ._search_space import parse_params
from ._validate import check_settings

_log = logging.getLogger(__name__)

EFFECTIVE_KEY = "effective_key"
REPEAT_OF = "repeat_of"


@dataclass
class SweepSettings:
    """The ``hydra.sweeper`` node, typed (see ``config.LoadertuneSweeperConf``)."""

    sampler: Any
    pruner: Any
    direction: Any = "minimize"
    storage: str | None = None
    study_name: str | None = None
    n_trials: int = 20
    max_trials_total: int | None = None
    n_jobs: int = 1
    allow_parallel_trials: bool = False
    max_failure_rate: float = 0.0
    report_every: int = 5
    memory_budget_mb: float | None = None
    stall_timeout_s: float = 60.0
    trial_timeout_s: float | None = None
    verdict_top: int = 3
    verdict_repeats: int = 3
    guess_range: bool = True
    params: dict[str, str] | None = None
    custom_search_space: str | None = None
    count_trials: str = "invocation"
    workers: int = 1
    force_fingerprint: bool = False


@dataclass
class SweepPlan:
    """What the sweep searches and where it records, settled before the first trial."""

    space: dict[str, BaseDistribution]
    fixed: dict[str, str]
    base: RunConfig
    accelerator: bool
    storage: str
    study_name: str
    sweep_dir: Path
    noop: list[str] = field(default_factory=list)
    # The space as written, before the model-based guess re-ranged num_workers: baselines
    # (the doubling path) follow the written range, not the searched one.
    written: dict[str, BaseDistribution] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.written = self.written or dict(self.space)

    def baseline_space(self) -> dict[str, BaseDistribution]:
        """The space baselines may use: the written one, widened where the search widened."""
        out = dict(self.written)
        for key, dist in self.space.items():
            old = out.get(key)
            if isinstance(dist, IntDistribution) and isinstance(old, IntDistribution):
                out[key] = IntDistribution(old.low, max(old.high, dist.high), step=old.step)
        return out


RANGE_ATTR = "workers_range"  # study user attr: the num_workers range the guess set


class SweepEngine:
    """Runs a study one trial at a time; the only writer to Optuna and MLflow."""

    def __init__(self, settings: SweepSettings) -> None:
        self.settings = settings
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None
        self.parent_run_id: str | None = None
        self._stop_requested = False
        self.memory_budget = 0

    def _on_sigint(self, signum: int, frame: Any) -> None:
        """Ctrl-C: finish the current trial's record, then stop (a second one stops now)."""
        if self._stop_requested:
            raise KeyboardInterrupt
        self._stop_requested = True

    def setup(
        self, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.hydra_context = hydra_context
        self.task_function = task_function
        self.config = config

    # ---- planning ---------------------------------------------------------------------

    def sweep(self, arguments: list[str]) -> None:
        """Run the sweep; bad input ends it with one line and exit status 2."""
        try:
            _fanout.check_settings(self.settings, self.config)
            if _fanout.wanted(self.settings, self.config):
                check_settings(self.settings)
                _fanout.fan_out(
                    self.settings, self.hydra_context, self.task_function, self.config, arguments
                )
                return
            plan = self._plan(arguments)
            s = self.settings
            sampler = create_sampler(s.sampler, plan.space)
            pruner = create_pruner(s.pruner)
        except (ConfigError, ValueError, ImportError) as exc:
            print(f"loadertune: error: {exc}", file=sys.stderr)
            sys.exit(2)
        try:
            study = _study.open_study(plan.storage, plan.study_name, s.direction, sampler, pruner)
        except Exception as exc:  # any storage failure: one line, nothing run
            line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            print(
                f"loadertune: error: hydra.sweeper.storage={plan.storage}: cannot open the study "
                f"({line}). Fix: check the URL, the server and its driver",
                file=sys.stderr,
            )
            sys.exit(2)
        try:
            joined = _fleet.admit(study, _fleet.fingerprint(), s.force_fingerprint)
        except ConfigError as exc:
            print(f"loadertune: error: {exc}", file=sys.stderr)
            sys.exit(2)
        if joined:
            print(f"loadertune: warning: {joined}", file=sys.stderr)
        self._run(plan, study, sampler)

    def _plan(self, arguments: list[str]) -> SweepPlan:
        assert self.config is not None
        s = self.settings
        check_settings(s)
        space, fixed = parse_params(s.params, arguments)
        import torch  # once here, so every forked trial starts with it loaded

        base_cfg = self._compose(self._first_point(space, fixed), job_num=0)
        base = to_run_config(base_cfg)
        from loadertune.trial import resolve_device
        from loadertune.validation import validate

        validate(base)
        accelerator = torch.device(resolve_device(base.trial.device)).type in ("cuda", "xpu")
        output_root = base.paths.output_root
        storage = _study.absolute_storage(s.storage, output_root)
        choices = {g: getattr(base, g).name for g in ("dataset", "storage", "model")}
        measured: dict[str, Any] = {
            k: OmegaConf.to_container(base_cfg[k], resolve=True)
            for k in ("dataset", "storage", "model", "loader", "trial")
        }
        for key in space:  # swept keys are not part of the workload's identity
            section, _, name = plain_key(key).partition(".")
            if isinstance(measured.get(section), dict):
                measured[section].pop(name, None)
        name = s.study_name or _study.default_study_name(choices, measured)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        # Settings that cannot act on this device are not searched at all (not even by a grid).
        noop = [k for k in space if not applies(k, 1, accelerator)]
        space = {k: v for k, v in space.items() if k not in noop}
        return SweepPlan(space, fixed, base, accelerator, storage, name, sweep_dir, noop)

    def _first_point(self, space: dict[str, BaseDistribution], fixed: dict[str, str]) -> list[str]:
        """Overrides for one representative trial: fixed values and each space's first value."""
        values: dict[str, Any] = {}
        for key, dist in space.items():
            if isinstance(dist, CategoricalDistribution):
                values[key] = dist.choices[0]
            elif isinstance(dist, IntDistribution | FloatDistribution):
                values[key] = dist.low
        return self._overrides(values, fixed, accelerator=False)

    def _overrides(
        self, values: dict[str, Any], fixed: dict[str, str], accelerator: bool
    ) -> list[str]:
        workers = self._num_workers(values, fixed)
        lines = [f"{k}={v}" for k, v in fixed.items() if applies(k, workers, accelerator)]
        lines += [
            f"{k}={_render(v)}" for k, v in values.items() if applies(k, workers, accelerator)
        ]
        return lines

    def _num_workers(self, values: dict[str, Any], fixed: dict[str, str]) -> int:
        for source in (values, fixed):
            for key, value in source.items():
                if plain_key(key) == "loader.num_workers":
                    return int(value)
        assert self.config is not None
        return int(self.config.loader.num_workers)

    def _compose(self, overrides: list[str], job_num: int) -> DictConfig:
        assert self.hydra_context is not None and self.config is not None
        cfg = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        with open_dict(cfg):
            cfg.hydra.job.id = str(job_num)
            cfg.hydra.job.num = job_num
        return cfg

    # ---- the loop -----------------------------------------------------------------------

    def _run(self, plan: SweepPlan, study: optuna.Study, sampler: Any) -> None:
        s = self.settings
        _quiet_libraries()
        orphans = _study.fail_orphaned_trials(study)
        exhaustive = isinstance(
            sampler, optuna.samplers.GridSampler | optuna.samplers.BruteForceSampler
        )
        if not study.trials and not exhaustive:  # a grid measures every point anyway
            _baselines.enqueue_initial(study, plan.space, usable_cpus())
        ranged = self._restore_range(study, plan)
        plan.sweep_dir.mkdir(parents=True, exist_ok=True)
        assert self.config is not None
        OmegaConf.save(self.config, plan.sweep_dir / "multirun.yaml")
        budget = _study.Budget.of(s.n_trials, s.max_trials_total, s.count_trials, study)
        recorder = SweepRecorder(
            plan.base.tracking,
            plan.base.paths.output_root,
            study,
            plan.storage,
            str(s.sampler.get("_target_", "")).rsplit(".", 1)[-1],
        )
        view = _console.SweepView(study, budget.shown, plan, orphans)
        if ranged:
            view.note(ranged)
        limits_base = self.memory_budget = _memory_budget(s.memory_budget_mb)
        recorder.record_orphans(study, orphans)
        self.parent_run_id = recorder.parent_id
        slots = _study.Slots(
            study,
            budget.total,
            stopped=lambda: self._stop_requested,
            on_lost=lambda lost: recorder.record_orphans(study, lost),
            note=view.note,
        )
        ran = failed = 0
        status = "FINISHED"
        bugs: list[str] = []
        previous_handler = signal.signal(signal.SIGINT, self._on_sigint)
        try:
            while budget.allows(ran) and not self._stop_requested:
                if hasattr(sampler, "is_exhausted") and sampler.is_exhausted(study):
                    view.note("the grid is covered: every point has been measured")
                    break
                trial = slots.next()
                if trial is None:
                    if not self._stop_requested:
                        view.note(f"the study holds its {budget.total} trials")
                    break
                answer = self._one_trial(study, trial, plan, limits_base)
                self._record(study, answer, recorder, view, ran + 1)
                if answer.reason == "interrupted":
                    break
                ran += 1
                failed += answer.state == TrialState.FAIL
                rung = _baselines.next_rung(
                    study, study.trials[answer.trial.number], plan.baseline_space()
                )
                if rung is not None:
                    study.enqueue_trial(rung, user_attrs={_baselines.BASELINE: "doubling"})
                self._enqueue_guess(study, plan, answer, view)
                if answer.measured:
                    bugs.append(_signature(answer) if answer.reason == "dataset_error" else "")
                if len(bugs) >= 2 and bugs[0] and bugs[:2] == [bugs[0]] * 2:
                    view.dataset_bug(answer.error or "")
                    status = "FAILED"
                    break
                if failed and failed / ran > s.max_failure_rate:
                    view.note(
                        f"stopping: {failed} of {ran} trials failed, above "
                        f"hydra.sweeper.max_failure_rate={s.max_failure_rate}"
                    )
                    status = "FAILED"
                    break
            if status == "FINISHED" and not self._stop_requested and s.verdict_repeats > 0:
                self._give_verdict(study, plan, recorder, view)
        except KeyboardInterrupt:
            self._stop_requested = True
        finally:
            slots.close()
            signal.signal(signal.SIGINT, previous_handler)
            if self._stop_requested:
                status = "KILLED"
                view.note("interrupted: the sweep stops; every finished trial is recorded")
            results = results_yaml(study, plan.storage)
            write_results(plan.sweep_dir, results)
            if results.get("best_value") is not None:
                recorder.finish(study, plan.sweep_dir, results, status)
            else:
                recorder.abort(status)
            view.final(results, plan.sweep_dir)

    def _one_trial(
        self, study: optuna.Study, trial: optuna.Trial, plan: SweepPlan, memory_budget: int
    ) -> _Answer:
        """Answer a claimed trial's settings: refused, repeated, or measured."""
        if self.parent_run_id:
            trial.set_user_attr(PARENT_RUN, self.parent_run_id)
        values = self._suggest(trial, plan)
        overrides = self._overrides(values, plan.fixed, plan.accelerator)
        trial.set_user_attr("overrides", overrides)
        job_cfg = self._compose(overrides, job_num=trial.number)
        resolved = OmegaConf.to_yaml(
            {k: v for k, v in job_cfg.items() if k != "hydra"}, resolve=True
        )
        answer = _Answer(trial, TrialState.PRUNED, yaml=resolved)
        try:
            from loadertune.validation import validate

            answer.config = to_run_config(job_cfg)
            validate(answer.config)
        except ConfigError as exc:
            answer.reason, answer.error = "invalid_config", str(exc)
            return answer
        key = effective_key(answer.config, plan.accelerator)
        trial.set_user_attr(EFFECTIVE_KEY, key)
        earlier = _same_measurement(study, key, trial.number)
        if earlier is not None:
            trial.set_user_attr(REPEAT_OF, earlier.number)
            answer.state, answer.value, answer.repeat_of = (
                TrialState.COMPLETE,
                earlier.value,
                earlier,
            )
            return answer
        outcome = self._measure(trial, job_cfg, answer.config, memory_budget)
        answer.outcome = outcome
        answer.reason, answer.error = outcome.reason, outcome.error
        if outcome.status == "complete" and outcome.result is not None:
            answer.state, answer.value = TrialState.COMPLETE, outcome.result.objective
        elif outcome.status == "pruned" or outcome.reason in INFEASIBLE:
            answer.state = TrialState.PRUNED
        else:
            answer.state = TrialState.FAIL
        return answer

    def _enqueue_guess(
        self, study: optuna.Study, plan: SweepPlan, answer: _Answer, view: _console.SweepView
    ) -> None:
        """After the default trial, predict the workers needed, re-range, measure that next."""
        if answer.trial.user_attrs.get(_baselines.BASELINE) != "default":
            return
        if answer.outcome is None or answer.outcome.result is None:
            return
        wkey = next((k for k in plan.space if plain_key(k) == "loader.num_workers"), None)
        if wkey is None:
            return
        dist = plan.space[wkey]
        may_widen = self.settings.guess_range and isinstance(dist, IntDistribution)
        high = _baselines.upper(dist)
        g = _guess.from_default_trial(
            answer.outcome.result,
            self.memory_budget / 2**20,
            max(high, _guess.widen_cap(usable_cpus())) if may_widen else high,
        )
        if g is None:
            return
        study.set_user_attr("guess", asdict(g))
        if may_widen and isinstance(dist, IntDistribution):
            _, new_high = _guess.workers_range(g, dist.low, dist.high, dist.step)
            if new_high != dist.high:
                written = [dist.low, dist.high, dist.step]
                study.set_user_attr(
                    RANGE_ATTR, {"key": wkey, "written": written, "searched": new_high}
                )
                message = self._restore_range(study, plan)
                if message:
                    view.note(message)
        params = _baselines.params_for(plan.space, _baselines.nearest(plan.space[wkey], g.workers))
        if params is not None:
            study.enqueue_trial(params, user_attrs={_baselines.BASELINE: "model_guess"})

    def _restore_range(self, study: optuna.Study, plan: SweepPlan) -> str | None:
        """Search the num_workers range the guess set, if the range is still as written then."""
        ranged = study.user_attrs.get(RANGE_ATTR)
        if not ranged or not self.settings.guess_range:
            return None
        key, (low, high, step), searched = ranged["key"], ranged["written"], ranged["searched"]
        written = plan.written.get(key)
        if written != IntDistribution(low, high, step=step):
            return None  # the command line changed the range since: it wins
        plan.space[key] = IntDistribution(low, searched, step=step)
        how = "widened" if searched > high else "narrowed"
        why = (
            "loading waits on I/O, so workers beyond the CPUs still help"
            if searched > high
            else "a few workers already hide loading behind the step"
        )
        return (
            f"the model-based guess {how} the {plain_key(key)} range from {low}..{high} to "
            f"{low}..{searched}: {why} (hydra.sweeper.guess_range=false keeps it as written)"
        )

    def _give_verdict(
        self,
        study: optuna.Study,
        plan: SweepPlan,
        recorder: SweepRecorder,
        view: _console.SweepView,
    ) -> None:
        """Re-measure the best settings and the baselines interleaved, recommend, export."""
        from loadertune.diagnosis import diagnose_result

        s = self.settings
        cands = _verdict.candidates(study.trials, s.verdict_top)
        if not cands:
            return
        view.note(
            f"verdict: measuring {len(cands)} settings {s.verdict_repeats} times each, interleaved"
        )

        def measure_round(round_: int, which: list[_verdict.Candidate]) -> bool:
            for c in which:
                if self._stop_requested:
                    return False
                overrides = [
                    *c.trial.user_attrs["overrides"],
                    f"hydra.sweep.subdir=verdict/{round_}-{c.trial.number}",
                ]
                job_cfg = self._compose(overrides, job_num=c.trial.number)
                config = to_run_config(job_cfg)
                outcome = self._measure(None, job_cfg, config, self.memory_budget)
                r = outcome.result
                if r is None:
                    continue
                c.values.append(r.objective)
                c.rounds.append(round_)
                c.samples_per_s.append(r.summary.samples_per_s)
                c.memory_mb.append(r.peak_memory_mb)
                c.cpu_percent.append(r.cpu_percent_mean)
                d = diagnose_result(r, self.memory_budget / 2**20)
                c.bottleneck, c.why = d.label, d.sentence
            return True

        for round_ in range(s.verdict_repeats):
            if not measure_round(round_, cands):
                return
        # Too close to call: a cheaper setting whose rounds neither clear it nor rule it out
        # gets more rounds, side by side with the fastest, up to twice the repeats.
        for extra in range(s.verdict_repeats):
            unsure = _verdict.unsure(cands)
            if not unsure:
                break
            names = ", ".join(f"trial {c.trial.number}" for c in unsure)
            view.note(f"verdict: too close to call, one more round of {names}")
            if not measure_round(s.verdict_repeats + extra, unsure):
                return
        if not any(c.values for c in cands):
            return
        rec = _verdict.recommend(cands)
        text = _verdict.verdict_markdown(
            rec,
            cands,
            guess=study.user_attrs.get("guess"),
            workers_range=study.user_attrs.get(RANGE_ATTR),
        )
        loader = self._export(plan, rec)
        (plan.sweep_dir / "verdict.md").write_text(text)
        from ._report_plots import verdict_figure

        verdict_figure(study, cands, study.user_attrs.get("guess"), plan.sweep_dir / "verdict.png")
        guessed = next((c for c in cands if "model-based guess" in c.labels and c.values), None)
        recorder.log_verdict(
            rec,
            text,
            plan.sweep_dir,
            study.user_attrs.get("guess"),
            guessed.median if guessed else None,
        )
        view.verdict(
            rec, cands, loader, study.user_attrs.get("guess"), study.user_attrs.get(RANGE_ATTR)
        )

    def _export(self, plan: SweepPlan, rec: _verdict.Recommendation) -> Path:
        """Write the recommended loader settings where configs and training code find them."""
        from dataclasses import asdict

        from loadertune.loader import effective_settings
        from loadertune.machine import machine_info

        config = to_run_config(self._compose(rec.chosen.trial.user_attrs["overrides"], 0))
        settings = asdict(
            effective_settings(
                config.loader,
                config.trial.device.replace("auto", "cuda" if plan.accelerator else "cpu"),
            )
        )
        host = machine_info()
        header = [
            f"Recommended by loadertune for study {plan.study_name} (trial "
            f"{rec.chosen.trial.number}): {rec.chosen.median:.4f} ms/sample, "
            f"{statistics.median(rec.chosen.samples_per_s):,.0f} samples/s median of "
            f"{len(rec.chosen.values)} repeats",
            f"on {host['host']} ({host['usable_cpus']} usable CPUs, {host['cpu_model']}, "
            f"gpu {host['gpu']}, torch {host['torch']}).",
            "Use: loadertune loader=best  |  in training code: "
            "loadertune.build_dataloader(dataset, OmegaConf.load(this_file))",
        ]
        text = _verdict.loader_yaml(settings, header)
        (plan.sweep_dir / "best_loader.yaml").write_text(text)
        group = Path(plan.base.paths.output_root).expanduser().resolve() / "conf" / "loader"
        group.mkdir(parents=True, exist_ok=True)
        (group / "best.yaml").write_text(text)
        return group / "best.yaml"

    def _suggest(self, trial: optuna.Trial, plan: SweepPlan) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for key in suggestion_order(list(plan.space)):
            needs_workers = plain_key(key) in NEEDS_WORKERS
            workers = self._num_workers(values, plan.fixed) if needs_workers else 0
            if not applies(key, workers, plan.accelerator):
                continue
            values[key] = _suggest_one(trial, key, plan.space[key])
        if self.settings.custom_search_space:
            from hydra.utils import get_method

            get_method(self.settings.custom_search_space)(self.config, trial)
            values.update({k: v for k, v in trial.params.items() if k not in values})
        return values

    def _measure(
        self,
        trial: optuna.Trial | None,
        job_cfg: DictConfig,
        config: RunConfig,
        memory_budget: int,
    ) -> TrialOutcome:
        """Run one trial process; ``trial`` gets pruner reports (None: never pruned)."""
        from loadertune.timing import summarize

        assert self.hydra_context is not None and self.task_function is not None
        s = self.settings

        def on_progress(steps: list[Any]) -> bool:
            if trial is None:
                return False
            trial.report(
                summarize(steps, config.loader.num_workers).time_per_sample_ms, step=len(steps)
            )
            return trial.should_prune()

        limits = Limits(
            wall_s=s.trial_timeout_s or config.trial.time_limit_s + 120.0,
            stall_s=s.stall_timeout_s,
            memory_bytes=memory_budget,
        )
        return run_trial_process(
            self.hydra_context,
            self.task_function,
            job_cfg,
            on_progress,
            s.report_every,
            limits,
            lambda: self._stop_requested,
        )

    def _record(
        self,
        study: optuna.Study,
        v: _Answer,
        recorder: SweepRecorder,
        view: _console.SweepView,
        index: int,
    ) -> None:
        """Tell Optuna, then record the trial in MLflow and on the console."""
        trial, outcome = v.trial, v.outcome
        if v.reason:
            trial.set_user_attr(_study.REASON, v.reason)
        if v.error:
            trial.set_user_attr("error", v.error[-4000:])
        if outcome is not None:
            for name in ("wall_s", "leaked_processes", "shm_files_removed", "oom_kills"):
                trial.set_user_attr(name, round(getattr(outcome, name), 3))
            trial.set_user_attr("timed_steps", len(outcome.steps))
            trial.set_user_attr("peak_memory_mb", round(outcome.peak_memory_bytes / 2**20, 1))
            if outcome.result is not None:  # what the report plots, kept with the trial
                r = outcome.result
                trial.set_user_attr("peak_memory_mb", round(r.peak_memory_mb, 1))
                trial.set_user_attr("cpu_percent_mean", round(r.cpu_percent_mean, 1))
                trial.set_user_attr("data_wait_fraction", round(r.summary.data_wait_fraction, 4))
                trial.set_user_attr("samples_per_s", round(r.summary.samples_per_s, 1))
        try:
            study.tell(trial, v.value if v.state == TrialState.COMPLETE else None, state=v.state)
        except RuntimeError as exc:  # GridSampler calls study.stop() once the grid is covered
            if "Study.stop" not in str(exc):
                raise
        frozen = study._storage.get_trial(trial._trial_id)
        tags = {"reason": v.reason} if v.reason else {}
        tags.update(_fleet.run_tags(frozen.user_attrs))
        if v.repeat_of is not None:
            tags["repeat_of"] = str(v.repeat_of.number)
        if outcome is not None and (outcome.leaked_processes or outcome.shm_files_removed):
            tags["cleanup"] = (
                f"killed {outcome.leaked_processes} leftover processes, removed "
                f"{outcome.shm_files_removed} /dev/shm files"
            )
        result = outcome.result if outcome else None
        from mlflow.exceptions import MlflowException

        try:
            recorder.record_trial(
                frozen, v.config, result, outcome.steps if outcome else [], v.yaml, tags
            )
        except MlflowException as exc:  # Optuna holds the trial; say so and carry on
            view.note(f"trial {frozen.number} is in Optuna but MLflow refused it: {exc}")
        view.trial(index, frozen, result)


@dataclass
class _Answer:
    """How one trial is answered, before it is told and recorded."""

    trial: optuna.Trial
    state: TrialState
    value: float | None = None
    reason: str | None = None
    error: str | None = None
    yaml: str = ""
    config: RunConfig | None = None
    outcome: TrialOutcome | None = None
    repeat_of: optuna.trial.FrozenTrial | None = None

    @property
    def measured(self) -> bool:
        """A trial process ran (not refused, not a repeat)."""
        return self.outcome is not None


def _signature(v: _Answer) -> str:
    """The last line of a failure's traceback: the same bug gives the same line."""
    lines = (v.error or "").strip().splitlines()
    return lines[-1] if lines else "?"


def _memory_budget(budget_mb: float | None) -> int:
    """The process-tree budget: as configured, or 3/4 of the memory available now."""
    if budget_mb is not None:
        return int(budget_mb * 2**20)
    return int(psutil.virtual_memory().available * 0.75)


def _quiet_libraries() -> None:
    """Keep the sweep's console to loadertune's own lines: libraries log at WARNING."""
    import mlflow  # noqa: F401  (mlflow sets its loggers' levels when imported)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # A baseline measured outside a range the guess narrowed is deliberate, not a mistake.
    warnings.filterwarnings("ignore", message="Fixed parameter .* is out of range")
    for name in ("mlflow", "matplotlib", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _same_measurement(study: optuna.Study, key: str, number: int) -> Any:
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if t.number != number and t.user_attrs.get(EFFECTIVE_KEY) == key:
            return t
    return None


def _suggest_one(trial: optuna.Trial, key: str, dist: BaseDistribution) -> Any:
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(key, dist.low, dist.high, step=dist.step, log=dist.log)
    if isinstance(dist, FloatDistribution):
        return trial.suggest_float(key, dist.low, dist.high, step=dist.step, log=dist.log)
    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(key, dist.choices)
    raise TypeError(f"{key}: unsupported distribution {dist!r}")


def _render(value: Any) -> str:
    """A Python value as override text Hydra parses back to the same value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        parser = OverridesParser.create()
        try:
            if parser.parse_override(f"k={value}").value() == value:
                return value
        except Exception:
            pass
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return str(value)
