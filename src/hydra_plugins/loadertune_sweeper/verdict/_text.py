"""The verdict in words: the markdown of ``verdict.md``, the terminal table, the loader YAML.

Statistics live in ``_candidates``; this module only says what they found.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from rich.table import Table

from loadertune.config import plain_key
from loadertune.decision import MIN_GAIN
from loadertune.measure import TOLERANCE, rounds_to_settle

from ..plan._baselines import Role
from ._candidates import LEFT_RACE, Candidate, Recommendation, compare

if TYPE_CHECKING:
    from loadertune.decision import Guess

    from ..plan._guess import WorkersRange
    from ._confidence import Assurance


SETTLE_MOST = 30  # the most rounds a "what would settle it" line looks ahead


def verdict_markdown(
    rec: Recommendation,
    cands: list[Candidate],
    assurance: Assurance,
    unit: str = "ms",
    guess: Guess | None = None,
    workers_range: WorkersRange | None = None,
    repeats: int = 3,
    stopped: str | None = None,
) -> str:
    """The verdict as a markdown table and sentences, for ``verdict.md`` and MLflow;
    ``stopped``: why the search stopped early (``plan._ceiling``), if it did."""
    rows = [
        "| setting | num_workers | params | time per sample (median of repeats) | spread | "
        "samples/s | wait p99 ms | long waits per 1000 steps | memory MB | CPU % | "
        "other work, CPU % | bottleneck |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in _ranked(cands):
        mark = " **recommended**" if c is rec.chosen else ""
        rows.append(
            f"| {c.name}{mark} | {c.workers} | {_params(c)} | {c.median:.4f} {unit} | "
            f"{c.spread:.1%} | {statistics.median(c.samples_per_s or [0]):,.0f} | "
            f"{statistics.median(c.wait_p99_ms or [0]):.1f} | "
            f"{statistics.median(c.long_waits or [0]):.0f} | "
            f"{statistics.median(c.memory_mb or [0]):,.0f} | "
            f"{statistics.median(c.cpu_percent or [0]):.0f} | "
            f"{statistics.median(c.other_cpu_percent or [0]):.0f} | {c.bottleneck} |"
        )
    lines = [headline(rec, unit), *unshown_lines(rec, repeats)]
    lines += [f"Not recommended: {f}." for f in failed_sentences(cands)]
    lines += ["", *confidence_lines(assurance)]
    lines += ["", *rows, "", ORDER, ""]
    lines += details(rec, cands, unit, guess, workers_range, stopped)
    return "\n".join(lines) + "\n"


def failed_sentences(cands: list[Candidate]) -> list[str]:
    """Each setting that failed a verdict round, named with every failure: such a setting
    is never recommended, however fast its other rounds."""
    return [
        f"trial {c.trial.number} ({c.name or 'searched'}, num_workers={c.workers}) failed in "
        + ", ".join(f"round {r} ({why})" for r, why in c.failed)
        for c in cands
        if c.failed
    ]


def rounds_line(
    rounds: int,
    repeats: int,
    cands: list[Candidate],
    spent_s: float = 0.0,
    train_hours: float | None = None,
) -> str:
    """How many rounds the verdict needed, what they cost, and which settings left the race
    when and why."""
    price = (
        f"a rival's round had to win back its seconds over train_hours={train_hours:g}"
        if train_hours
        else f"a rival's round had to be expected to win back {MIN_GAIN:.1%} of throughput"
    )
    measured = sum(len(c.values) for c in cands)
    line = (
        f"\nRounds: {rounds} (verdict_repeats={repeats}; up to {2 * repeats}), {measured} "
        f"measurements in {spent_s:.0f} s: a round runs only while it can still change the "
        f"pick or lift its label ({price})."
    )
    why: dict[str, list[Candidate]] = {}
    for c in cands:
        if c.left_after is not None:
            why.setdefault(c.left_why or LEFT_RACE, []).append(c)
    for reason, left in why.items():
        named = ", ".join(f"trial {c.trial.number} after {c.left_after}" for c in left)
        line += f" Left the race, {reason}: {named}."
    return line + "\n" + by_round_table(cands)


def by_round_table(cands: list[Candidate], unit: str = "ms") -> str:
    """Each setting's time per sample in each round (the ratios compared are read across a
    row), so a reader sees the scatter behind the medians; ``-``: not measured that round.
    Rounds are numbered as their folders (``verdict/<round>-<trial>/``) and MLflow steps."""
    measured = [c for c in cands if c.values]
    rounds = sorted({r for c in measured for r in c.by_round})
    if not rounds:
        return ""
    head = " | ".join(f"trial {c.trial.number}" for c in measured)
    rows = [
        f"\nTime per sample ({unit}) by round (folders verdict/<round>-<trial>/):\n",
        f"| round | {head} |",
        "|---" * (len(measured) + 1) + "|",
    ]
    for r in rounds:
        cells = " | ".join(f"{c.by_round[r]:.4f}" if r in c.by_round else "-" for c in measured)
        rows.append(f"| {r} | {cells} |")
    return "\n".join(rows) + "\n"


def headline(rec: Recommendation, unit: str = "ms") -> str:
    """The recommendation in one sentence, with what the rounds showed."""
    chosen, fastest = rec.chosen, rec.fastest
    head = f"**Recommended: num_workers={chosen.workers}** (trial {chosen.trial.number}): "
    if rec.is_fastest:
        return head + (
            f"the fastest setting measured, {chosen.median:.4f} {unit} per sample (median of "
            f"{len(chosen.values)} repeats, which spread {chosen.spread:.1%}), and no cheaper "
            f"setting was shown to be within {TOLERANCE:.0%} of it."
        )
    ratio = compare(chosen, fastest)[0]
    if rec.ceiling is not None:
        return head + (
            f"the fastest setting of at most {rec.ceiling} workers, the count the search "
            "found enough when it stopped (below). The fastest measured, "
            f"num_workers={fastest.workers} (trial {fastest.trial.number}, "
            f"{fastest.median:.4f} {unit}), was not shown faster: round by round this one's "
            f"time is {ratio - 1:+.1%} against "
            f"the fastest's at the median, at most {rec.may_cost:+.1%} at the top of a 95% "
            "interval; more workers than the search found enough cost memory and CPU for no "
            "speed shown."
        )
    return head + (
        f"the cheapest setting shown as fast as the fastest (trial {fastest.trial.number}, "
        f"{fastest.median:.4f} {unit}): round by round its time is {ratio - 1:+.1%} against "
        f"the fastest's at the median, and at most {rec.may_cost:+.1%} at the top of a 95% "
        f"interval, within the {TOLERANCE:.0%} the verdict accepts for a cheaper setting."
    )


def unshown_lines(rec: Recommendation, repeats: int) -> list[str]:
    """The cheaper settings the rounds did not show as fast: what each might cost, and what
    would settle it (:func:`loadertune.measure._paired_stats.rounds_to_settle`)."""
    lines = []
    for c, u in sorted(rec.unshown, key=lambda cu: cu[0].workers):
        settle = rounds_to_settle(c.by_round, rec.fastest.by_round, SETTLE_MOST)
        if settle is None:
            how = "a quieter machine: at the scatter measured, no number of rounds would"
        else:
            how = f"about {settle} rounds: run again with hydra.sweeper.verdict_repeats="
            how += f"{max(repeats, -(-settle // 2))}"
        lines.append(
            f"Cheaper, not shown as fast: num_workers={c.workers} (trial {c.trial.number}), "
            f"{u.ratio - 1:+.1%} at the median, up to {u.may_cost:+.1%} (95% interval); what "
            f"would settle it: {how}."
        )
    return lines


def per_rank_line(workers: int, ranks: int) -> str:
    """With several ranks per node: the workers named are each rank's; the node's total."""
    return (
        f"Per rank: num_workers={workers} in each of {ranks} ranks "
        f"(trial.nproc_per_node={ranks}), {workers * ranks} worker processes on the node."
    )


def confidence_lines(assurance: Assurance) -> list[str]:
    """How sure the verdict is, why, and what would settle what is open."""
    lines = [f"Confidence: {assurance.level.value}. {assurance.why}"]
    if assurance.unsettled:
        names = ", ".join(f"trial {c.trial.number} ({c.name})" for c in assurance.unsettled)
        lines.append(f"Not told apart from the recommendation: {names}.")
    if assurance.settle:
        lines.append(f"What would settle it: {assurance.settle}.")
    return lines


def details(
    rec: Recommendation,
    cands: list[Candidate],
    unit: str = "ms",
    guess: Guess | None = None,
    workers_range: WorkersRange | None = None,
    stopped: str | None = None,
) -> list[str]:
    """Markdown lines under the table: speed-ups, what limits, the guess, the range, and
    why the search stopped short of its budget."""
    text = [  # none over the advice the pick itself stands for: that would read 1.00x
        f"- speed-up over {role.label}: {mid:.2f}x (rounds ranged {low:.2f}x to {high:.2f}x)"
        for role, (mid, low, high) in rec.speedups.items()
        if role not in rec.chosen.roles
    ]
    if rec.chosen.why:
        text += ["", f"What limits it: {rec.chosen.why}"]
    if rec.chosen.first_batch_s:
        text += ["", first_batch_line(rec, cands)]
    if guess:
        text += ["", _guess_line(guess, cands, unit)]
    if workers_range:
        low, high, _ = workers_range.written
        how = "widened" if workers_range.widened else "narrowed"
        text += [
            "",
            f"The guess {how} the num_workers search range from {low}..{high} to "
            f"{low}..{workers_range.searched}.",
        ]
    if stopped:
        text += ["", f"The search stopped before its trial budget: {stopped}."]
    return text


def first_batch_line(rec: Recommendation, cands: list[Candidate]) -> str:
    """Time to first batch (every worker starting and opening its shards), outside the time
    per sample, paid again each epoch unless ``persistent_workers``."""
    measured = [c for c in _ranked(cands) if c.first_batch_s]
    counts = [c.workers for c in measured]
    # Named by worker count, or by their settings where two share one.
    others = ", ".join(
        f"{_params(c, short=True) if counts.count(c.workers) > 1 else f'{c.workers} workers'} "
        f"{statistics.median(c.first_batch_s):.2f} s"
        for c in measured
        if c is not rec.chosen
    )
    return (
        f"Time to first batch (worker start-up and first reads, not in the time per sample; "
        f"paid again each epoch unless persistent_workers): "
        f"{statistics.median(rec.chosen.first_batch_s):.2f} s for the recommendation"
        + (f" ({others})." if others else ".")
    )


def _guess_line(guess: Guess, cands: list[Candidate], unit: str) -> str:
    """The model-based guess, what it came from, and what was measured for it."""
    measured = next((c for c in cands if Role.MODEL_GUESS in c.roles), None)
    line = (
        f"Model-based guess (from the 0-worker trial: {guess.load_ms_per_batch:.1f} ms to "
        f"load a batch on {guess.cpu_share_of_loading:.1f} cores, "
        f"{guess.step_ms:.1f} ms a step on {guess.step_cpu_cores:.1f} cores): "
        f"num_workers={guess.workers} (bound: {guess.bound.value}), predicted "
        f"{guess.time_per_sample_ms:.4f} {unit}"
    )
    if measured is not None and measured.values:
        line += f", measured {measured.median:.4f} {unit}"
    return line + "."


def verdict_table(rec: Recommendation, cands: list[Candidate], unit: str = "ms") -> Any:
    """The candidates as a rich table narrow enough for an 80-column terminal."""
    table = Table(title="the verdict: settings measured again, interleaved", title_justify="left")
    table.add_column("setting", ratio=3)
    table.add_column("params", ratio=2)
    table.add_column(f"{unit}/sample", justify="right", no_wrap=True)
    table.add_column("spread", justify="right", no_wrap=True)
    table.add_column("MB", justify="right", no_wrap=True)
    table.add_column("bottleneck", ratio=2)
    for c in _ranked(cands):
        name = f"[bold green]recommended[/] {c.name}" if c is rec.chosen else c.name
        table.add_row(
            name,
            _params(c, short=True),
            f"{c.median:.4f}",
            f"{c.spread:.0%}",
            f"{statistics.median(c.memory_mb or [0]):,.0f}",
            c.bottleneck,
        )
    return table


ORDER = (
    "Rows in the search's order: its fastest settings first (top 1, top 2, ...: their time in "
    "the search), then the baselines; each time shown is the verdict's median of its repeats."
)


def _ranked(cands: list[Candidate]) -> list[Candidate]:
    """The measured candidates in the search's order: a stable order, whatever the rounds
    measured (the top ranks come first, in rank order)."""
    return sorted(
        (c for c in cands if c.values),
        key=lambda c: (float("inf") if c.trial.value is None else c.trial.value, c.trial.number),
    )


_SHORT = {
    "num_workers": "workers",
    "prefetch_factor": "prefetch",
    "pin_memory": "pin",
    "persistent_workers": "persistent",
    "batch_size": "batch",
}


def _params(c: Candidate, short: bool = False) -> str:
    names = [(plain_key(k).split(".")[-1], v) for k, v in c.trial.params.items()]
    return " ".join(f"{_SHORT.get(n, n) if short else n}={v}" for n, v in names)
