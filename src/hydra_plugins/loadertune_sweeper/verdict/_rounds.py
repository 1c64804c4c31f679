"""The verdict, run: measure the candidates again interleaved, recommend, export the loader.

Handed a ``measure`` function (the sweep's way of running one trial process), so it needs
neither the sweep loop nor the console: what a person should read comes back as text.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadertune._lazy import optuna
from loadertune.loader import TUNED_FOR, effective_settings, loader_yaml, use_command
from loadertune.machine import machine_info, usable_cpus
from loadertune.measure import MAX_STEPS_FACTOR, diagnose_result, steps_for_tail
from loadertune.record import write_text_atomically

from .._keys import TrialAttr, TrialFigures
from ..plan._baselines import Role
from ..plan._ceiling import enough_workers, stopped_why
from ..plan._guess import study_guess, study_range
from ..study import _storage
from . import _candidates, _text
from ._candidates import Candidate, Recommendation
from ._confidence import Assurance, assess, busy_share
from ._figure import verdict_figure
from ._race import Pricing, run_rounds

if TYPE_CHECKING:
    from loadertune.config import RunConfig
    from loadertune.record import TrialResult

    from ..plan._sweep_plan import SweepPlan

# A verdict round times exactly trial.steps steps: its precision comes from the repeats,
# compared round by round, not from a longer window. A setting whose search trial stalled
# for data gets the steps that hold its stalls (round_window).
ROUND_WINDOW = ["trial.precision=null"]

# Run the trial these overrides give, as job ``job_num``; if it measured nothing, why.
Measure = Callable[[list[str], int], "TrialResult | str"]
# The typed config these overrides give.
ConfigOf = Callable[[list[str]], "RunConfig"]


@dataclass
class Verdict:
    """What the verdict found and where it wrote it."""

    rec: Recommendation
    cands: list[Candidate]
    assurance: Assurance
    markdown: str
    loader_file: Path  # the config group option ``loader=best``
    settings: dict[str, Any]  # the loader settings written there
    rounds: int = 0  # the interleaved rounds it needed

    @property
    def guess_measured_ms(self) -> float | None:
        """The measured time per sample of the model-based guess's setting."""
        guessed = _candidates.with_role(self.cands, Role.MODEL_GUESS)
        return guessed.median if guessed else None


@dataclass
class VerdictRun:
    """One verdict over a finished search."""

    study: optuna.Study
    plan: SweepPlan
    measure: Measure
    config_of: ConfigOf
    stopped: Callable[[], bool]
    note: Callable[[str], None]
    memory_budget_mb: float
    train_hours: float | None = None  # how long the tuned loader will train (Pricing)

    def run(self, top: int, repeats: int) -> Verdict | None:
        """Measure the ``top`` settings and the baselines in up to ``repeats`` interleaved
        rounds, recommend, export; None when there is nothing to compare or the sweep was
        stopped. See :func:`run_rounds` for when the rounds stop."""
        space = self.plan.baseline_space()  # the range asked for, widened where the guess did
        searched = [t for t in self.study.trials if _storage.in_space(t, space)]
        cands = _candidates.candidates(searched, top)
        if not cands:
            return None
        self.note(
            f"verdict: measuring {len(cands)} settings up to {repeats} times each, "
            "interleaved, until the pick is settled"
        )
        pricing = Pricing(self.train_hours)
        rounds = run_rounds(cands, repeats, self._round, self.note, usable_cpus(), pricing)
        if rounds is None:
            return None
        if not _candidates.in_race(cands):
            failed = "; ".join(_text.failed_sentences(cands)) or "no setting measured"
            self.note(f"verdict: nothing to recommend: {failed}")
            return None
        return self._conclude(cands, repeats, rounds, pricing)

    def _round(self, round_: int, which: list[Candidate]) -> bool:
        """Measure each of ``which`` once; False if the sweep was stopped meanwhile. A
        measurement that failed (crash, timeout, memory) is kept as the setting's failure:
        it leaves the race (:func:`run_rounds`) rather than lose a round without a word."""

        for c in which:
            if self.stopped():
                return False
            overrides = [
                *c.trial.user_attrs[TrialAttr.OVERRIDES],
                *self.round_window(c),
                f"hydra.sweep.subdir=verdict/{round_}-{c.trial.number}",
            ]
            r = self.measure(overrides, c.trial.number)
            if isinstance(r, str):
                if self.stopped():  # interrupted: not the setting's failure
                    return False
                c.failed.append((round_, r))
                self.note(f"verdict: trial {c.trial.number} failed in round {round_}: {r}")
                continue
            self._keep(c, round_, r)
        return True

    def round_window(self, c: Candidate) -> list[str]:
        """The window of ``c``'s rounds: ``trial.steps`` steps, or as many as hold the long
        waits its search trial showed (:func:`loadertune.measure.steps_for_tail`), up to
        ``trial.max_steps``: every setting in a round is judged over its stalls alike."""
        trial = self.plan.base.trial
        figures = TrialFigures.of(c.trial.user_attrs)
        per_1000 = (figures.long_waits_per_1000_steps or 0.0) if figures else 0.0
        cap = trial.max_steps or MAX_STEPS_FACTOR * trial.steps
        steps = steps_for_tail(per_1000, trial.steps, cap)
        return ROUND_WINDOW + ([f"trial.steps={steps}"] if steps != trial.steps else [])

    def _keep(self, c: Candidate, round_: int, r: TrialResult) -> None:
        """One round's figures of ``c``."""
        c.values.append(r.objective)
        c.rounds.append(round_)
        c.samples_per_s.append(r.summary.samples_per_s)
        c.memory_mb.append(r.peak_memory_mb)
        c.cpu_percent.append(r.cpu_percent_mean)
        c.other_cpu_percent.append(r.other_cpu_percent)
        c.steal_percent.append(r.steal_percent)
        c.first_batch_s.append(r.first_batch_s)
        c.wait_p99_ms.append(r.summary.data_wait_ms_p99)
        c.long_waits.append(r.summary.long_waits_per_1000_steps)
        d = diagnose_result(r, self.memory_budget_mb)
        c.bottleneck, c.why = d.label, d.sentence

    def _conclude(
        self, cands: list[Candidate], repeats: int, rounds: int, pricing: Pricing
    ) -> Verdict:
        """Recommend, say how sure, write verdict.md, verdict.png, best_loader.yaml and
        ``loader=best``."""

        rec = _candidates.recommend(cands, enough_workers(self.study))
        assurance = assess(rec, cands, usable_cpus(), repeats, search_busy(self.study))
        guess = study_guess(self.study)
        text = _text.verdict_markdown(
            rec,
            cands,
            assurance,
            guess=guess,
            workers_range=study_range(self.study),
            repeats=repeats,
            stopped=stopped_why(self.study),
        )
        text += _text.rounds_line(rounds, repeats, cands, pricing.spent_s, self.train_hours)
        config = self.config_of(rec.chosen.trial.user_attrs[TrialAttr.OVERRIDES])
        ranks = config.trial.nproc_per_node
        if ranks > 1:  # the workers named are each rank's
            head, _, rest = text.partition("\n")
            text = f"{head}\n\n{_text.per_rank_line(rec.chosen.workers, ranks)}\n{rest}"
        sweep_dir = self.plan.sweep_dir
        write_text_atomically(sweep_dir / "verdict.md", text)
        loader_file, settings = export(self.plan, rec, assurance, config)
        verdict_figure(self.study, cands, guess, sweep_dir / "verdict.png", rec.chosen)
        return Verdict(rec, cands, assurance, text, loader_file, settings, rounds)


def search_busy(study: optuna.Study) -> list[float]:
    """Each measured search trial's share of the CPUs that other work and steal took."""
    kept = [
        TrialFigures.of(t.user_attrs)
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    ]
    return [
        busy_share([(f.other_cpu_percent, f.steal_percent or 0.0)], usable_cpus())
        for f in kept
        if f is not None and f.other_cpu_percent is not None
    ]


def export(
    plan: SweepPlan, rec: Recommendation, assurance: Assurance, config: RunConfig
) -> tuple[Path, dict[str, Any]]:
    """Write the recommended loader settings (``config``'s) where configs and code find them;
    return the ``loader=best`` file and the settings written to it."""

    device = config.trial.device.replace("auto", "cuda" if plan.accelerator else "cpu")
    settings = asdict(effective_settings(config.loader, device))
    header = [*_export_header(plan, rec), *_text.confidence_lines(assurance)]
    ranks = config.trial.nproc_per_node
    if ranks > 1:  # the settings are each rank's: say for how many ranks they were tuned
        settings[TUNED_FOR] = ranks
        header.append(
            f"Tuned for {ranks} ranks per node (torchrun --nproc-per-node={ranks}): the settings "
            f"are per rank, {ranks * settings['num_workers']} worker processes on the node."
        )
    text = loader_yaml(settings, header)
    write_text_atomically(plan.sweep_dir / "best_loader.yaml", text)
    group = Path(plan.base.paths.output_root).expanduser().resolve() / "conf" / "loader"
    group.mkdir(parents=True, exist_ok=True)
    write_text_atomically(group / "best.yaml", text)
    return group / "best.yaml", settings


def _export_header(plan: SweepPlan, rec: Recommendation) -> list[str]:
    """The comment lines of ``best_loader.yaml``: what, how fast, where measured, how to use."""

    host = machine_info()
    chosen = rec.chosen
    return [
        f"Recommended by loadertune for study {plan.study_name} (trial "
        f"{chosen.trial.number}): {chosen.median:.4f} ms/sample, "
        f"{statistics.median(chosen.samples_per_s):,.0f} samples/s median of "
        f"{len(chosen.values)} repeats",
        f"on {host['host']} ({host['usable_cpus']} usable CPUs, {host['cpu_model']}, "
        f"gpu {host['gpu']}, torch {host['torch']}).",
        f"Use: {use_command(Path(plan.base.paths.output_root) / 'conf' / 'loader' / 'best.yaml')}"
        "  |  in training code: loadertune.build_dataloader(dataset, this_file)",
    ]
