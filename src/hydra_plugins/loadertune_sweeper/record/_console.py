"""What a person watching a sweep sees: one line per trial, then a ranked table.

A line of its own (a trial, a note, a path) is printed whole, however narrow the console:
the terminal folds it for the eye, and a log or ``grep`` still finds it on one line.
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial, TrialState
from rich.markdown import Markdown
from rich.table import Table

from loadertune.loader import TUNED_FOR, use_command
from loadertune.record import Reason, wide_console

from .._keys import Recommended, Results, TrialAttr
from ..study._storage import counts
from ..verdict._text import (
    ORDER,
    confidence_lines,
    details,
    failed_sentences,
    headline,
    per_rank_line,
    unshown_lines,
    verdict_table,
)

if TYPE_CHECKING:
    from loadertune.decision import Guess
    from loadertune.record import TrialResult

    from ..plan._guess import WorkersRange
    from ..plan._sweep_plan import SweepPlan
    from ..verdict._candidates import Candidate, Recommendation
    from ..verdict._confidence import Assurance


class SweepView:
    """Console view of a running sweep."""

    def __init__(
        self, study: optuna.Study, budget: int, plan: SweepPlan, orphans: list[int]
    ) -> None:
        self.study = study
        self.budget = budget
        self.console = wide_console()
        self._asked_again: Counter[int] = Counter()  # repeats not shown yet: trial -> times
        # The trials that count against a total (``counts``), as the budget beside it does:
        # a repeat answered from the cache or a trial lost with its sweep measured nothing.
        earlier = sum(t.state.is_finished() and counts(t) for t in study.get_trials(deepcopy=False))
        self.console.print(
            f"[bold]study[/] {study.study_name}  [dim]{plan.storage}[/]\n"
            f"{earlier} earlier trials; running {budget} now; sweep dir {plan.sweep_dir}",
            soft_wrap=True,
        )
        if orphans:
            self.note(f"marked FAIL trials left RUNNING by a process that is gone: {orphans}")
        if plan.noop:
            self.note(f"not searched (no effect on this device): {', '.join(plan.noop)}")
        if plan.shard_cap is not None:
            self.note(
                f"loader.num_workers searched up to {plan.shard_cap}: the dataset's shards per "
                "rank (a worker without a shard yields nothing)"
            )

    def user_bug(self, traceback: str, reason: Reason = Reason.DATASET_ERROR) -> None:
        """Say once that the dataset (the training step for ``step_error``, loadertune itself
        for ``internal_error``) is broken, with the original traceback."""
        self._show_repeats()
        if reason == Reason.INTERNAL_ERROR:
            self.console.print(
                "[bold red]stopping: the first trials failed with the same error raised by "
                "loadertune itself, whatever the loader settings. This is a bug in loadertune, "
                "not in the dataset or the step: please report it with the traceback below.[/]"
            )
            self.console.print(traceback, markup=False, highlight=False)
            return
        where = "the training step (model.*)" if reason == Reason.STEP_ERROR else "the dataset"
        self.console.print(
            f"[bold red]stopping: the first trials failed with the same error in {where}, "
            f"whatever the loader settings. This is a bug in {where}, not a setting to "
            "tune; fix it and run the same command again (the study resumes).[/]"
        )
        self.console.print(traceback, markup=False, highlight=False)

    def verdict(
        self,
        rec: Recommendation,
        cands: list[Candidate],
        assurance: Assurance,
        loader: Path,
        guess: Guess | None = None,
        workers_range: WorkersRange | None = None,
        repeats: int = 3,
        stopped: str | None = None,
    ) -> None:
        """The verdict as a table that fits 80 columns, its sentences, and the export
        (``stopped``: why the search stopped early, if it did)."""
        self._show_repeats()
        self.console.print(Markdown(headline(rec)))
        for line in unshown_lines(rec, repeats):
            self.console.print(line, highlight=False)
        for failed in failed_sentences(cands):
            self.console.print(f"[red]Not recommended: {failed}.[/]", highlight=False)
        colour = {"high": "green", "medium": "yellow", "low": "red"}[assurance.level.value]
        for i, line in enumerate(confidence_lines(assurance)):
            self.console.print(f"[bold {colour}]{line}[/]" if i == 0 else line, highlight=False)
        self.console.print(verdict_table(rec, cands))
        self.console.print(f"[dim]{ORDER}[/]")
        lines = details(rec, cands, "ms", guess, workers_range, stopped)
        self.console.print(Markdown("\n".join(lines)))
        self.console.print(f"exported: {loader}  (use: {use_command(loader)})", soft_wrap=True)

    def note(self, text: str) -> None:
        self._show_repeats()
        self.console.print(f"[yellow]{text}", soft_wrap=True)

    def trial(self, index: int, frozen: FrozenTrial, result: TrialResult | None) -> None:
        """One line per trial run; a repeat answered from an earlier trial is only counted,
        and the repeats since the last line are said in one line before the next."""
        repeat = frozen.user_attrs.get(TrialAttr.REPEAT_OF)
        if repeat is not None:
            self._asked_again[int(repeat)] += 1
            return
        self._show_repeats()
        params = " ".join(f"{k.split('.')[-1]}={v}" for k, v in frozen.params.items())
        if frozen.state == TrialState.COMPLETE:
            outcome = f"{frozen.value:.4f} ms/sample"
            if result is not None:
                outcome += f"  {result.summary.samples_per_s:,.0f} samples/s"
                outcome += _window_note(result)
        else:
            outcome = _stopped_outcome(frozen)
        best = self._best()
        self.console.print(
            f"[{index}/{self.budget}] trial {frozen.number}  {params or '(defaults)'}  ->  "
            f"{outcome}  [dim]best {best}[/]",
            soft_wrap=True,
        )

    def steered(self, favourite: int) -> None:
        """The sampler keeps asking for trial ``favourite``'s setting: said at the end of
        the line of repeats, since the next trial is the sweep's choice, not the sampler's."""
        self._show_repeats(
            f"the sampler keeps asking for trial {favourite}'s setting: measuring the "
            "nearest setting not yet measured instead"
        )

    def _show_repeats(self, then: str = "") -> None:
        """The settings the sampler asked for again since the last line, in one line, and
        ``then``, what the sweep does about it."""
        parts = [then] if then else []
        if self._asked_again:
            which = ", ".join(
                f"trial {n}'s" + (f" ({k} times)" if k > 1 else "")
                for n, k in self._asked_again.items()
            )
            parts.insert(
                0, f"asked again, answered from the trial that measured it, not run: {which}"
            )
            self._asked_again.clear()
        if parts:
            self.console.print(f"[dim]  {'; '.join(parts)}[/]", soft_wrap=True)

    def _best(self) -> str:
        try:
            b = self.study.best_trial
        except ValueError:
            return "-"
        return f"{b.value:.4f} (#{b.number})"

    def final(self, results: dict[str, Any], sweep_dir: Path, landing: Sequence[str] = ()) -> None:
        """The trials, fastest first; how to open the sweep in MLflow; where the results
        are; and last, the recommendation and where it was written."""
        self._show_repeats()
        table = Table(title=f"study {self.study.study_name}: trials, fastest first")
        for column in ("#", "state", "params", "ms/sample", "note"):
            table.add_column(column)
        for row in table_rows(self.study.get_trials(deepcopy=False))[:20]:
            table.add_row(*row)
        self.console.print(table)
        for line in landing:
            self.console.print(line, highlight=False, soft_wrap=True)
        self.console.print(f"results: {sweep_dir / 'optimization_results.yaml'}", soft_wrap=True)
        for line in outcome_lines(results):
            self.console.print(line, highlight=False, soft_wrap=True)


def table_rows(trials: Sequence[FrozenTrial]) -> list[tuple[str, str, str, str, str]]:
    """The final table's rows, fastest first: one per measurement.

    A trial answered from an earlier measurement of the same settings (``repeat_of``) is not
    a row of its own: the row it repeats says "also asked as #n", so the table's rows are
    distinct settings and a repeated baseline does not push measured ones out of the top 20.
    """
    asked_again: dict[int, list[int]] = {}
    for t in trials:
        if t.user_attrs.get(TrialAttr.REPEAT_OF) is not None:
            asked_again.setdefault(int(t.user_attrs[TrialAttr.REPEAT_OF]), []).append(t.number)
    measured = [t for t in trials if t.user_attrs.get(TrialAttr.REPEAT_OF) is None]
    ranked = sorted(
        measured, key=lambda t: (t.state != TrialState.COMPLETE, t.value or float("inf"))
    )
    rows = []
    for t in ranked:
        reason = str(t.user_attrs.get(TrialAttr.REASON, ""))
        notes = [reason if reason != t.state.name.lower() else ""]  # not "PRUNED pruned"
        if t.number in asked_again:
            notes.append("also asked as " + ", ".join(f"#{n}" for n in asked_again[t.number]))
        rows.append(
            (
                str(t.number),
                t.state.name,
                " ".join(f"{k}={v}" for k, v in t.params.items()),
                "" if t.value is None else f"{t.value:.4f}",
                "; ".join(n for n in notes if n),
            )
        )
    return rows


def outcome_lines(results: dict[str, Any]) -> list[str]:
    """The sweep's answer in words: the verdict's recommendation and where it was written;
    without a verdict, the search's fastest measurement, named as such."""
    rec = results.get(Results.RECOMMENDED)
    if rec:
        return _recommended_lines(rec)
    if results.get(Results.BEST_VALUE) is None:
        return ["no trial completed: nothing to recommend"]
    params = " ".join(f"{k}={v}" for k, v in (results.get(Results.BEST_PARAMS) or {}).items())
    return [
        f"fastest in the search (no verdict, so not a recommendation): trial "
        f"{results[Results.BEST_TRIAL_NUMBER]} at {results[Results.BEST_VALUE]:.4f} ms/sample with "
        f"{params or '(defaults)'}"
    ]


def quiet_libraries() -> None:
    """Keep the sweep's console to loadertune's own lines: libraries log at WARNING."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # A baseline measured outside a range the guess narrowed is deliberate, not a mistake.
    warnings.filterwarnings("ignore", message="Fixed parameter .* is out of range")
    for name in ("mlflow", "matplotlib", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # MLflow logs a store's error with its whole traceback before raising it; the sweep
    # reports it itself (a full disk in one line), so that log would only bury the line.
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    # A lost tracking server is reported in one line; urllib3's "Retrying" lines would bury it.
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)


def _stopped_outcome(frozen: FrozenTrial) -> str:
    """A trial that did not complete: its state, why when the state does not say it, and
    for a pruned one how far it got: ``PRUNED after 15 steps at 2.0321 ms/sample``."""
    outcome = f"[red]{frozen.state.name}[/]"
    reason = str(frozen.user_attrs.get(TrialAttr.REASON, ""))
    if reason and reason != frozen.state.name.lower():
        outcome += f" {reason}"
    if frozen.state == TrialState.PRUNED and frozen.value is not None:
        outcome += f" after {frozen.last_step} steps at {frozen.value:.4f} ms/sample"
    return outcome


def _window_note(result: TrialResult) -> str:
    """How sure the figure is and what else ran: ``±1.2%  other work 35% cpu``."""
    parts = []
    if result.rate_ci_pct is not None:
        parts.append(f"±{result.rate_ci_pct:.1f}%")
    other = f"other work {result.other_cpu_percent:.0f}% cpu"
    if result.steal_percent >= 0.5:
        other += f", steal {result.steal_percent:.0f}%"
    parts.append(other)
    return "  [dim]" + "  ".join(parts) + "[/]"


def _recommended_lines(rec: dict[str, Any]) -> list[str]:
    """The verdict's pick (the ``recommended:`` block), where it was written, and with
    several ranks, that its workers are each rank's."""
    key = Recommended
    params = " ".join(f"{k}={v}" for k, v in rec[key.PARAMS].items()) or "(defaults)"
    written = rec[key.WRITTEN_TO]
    lines = [
        f"[bold green]recommended:[/] {params} (trial {rec[key.TRIAL_NUMBER]}): "
        f"{rec[key.TIME_PER_SAMPLE_MS]:.4f} ms/sample, {rec[key.SAMPLES_PER_S]:,.0f} samples/s "
        f"(median of {rec[key.REPEATS]} verdict repeats); confidence {rec[key.CONFIDENCE]}",
        f"written to: {' and '.join(written)}  (use: {use_command(written[-1])})",
    ]
    loader = rec.get(key.LOADER) or {}
    ranks = int(loader.get(TUNED_FOR) or 1)
    if ranks > 1:  # the settings are each rank's
        lines.insert(1, per_rank_line(int(loader["num_workers"]), ranks))
    return lines
