"""The verdict: re-measure the best settings and the baselines side by side, recommend the
cheapest setting that is as fast as the fastest within the noise measured, and export it.

Trials in a study are measured once each, at different moments of a shared machine's life.
Before recommending, the top few settings and the baselines are measured again, interleaved
(A B C A B C ...) so drift hits them alike. Two settings are then compared round by round:
the ratio of their times in each round cancels what the machine was doing in that round, so
a steady 5% gap stands out even while the machine's own speed wanders by 30%.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from loadertune.search_rules import plain_key

from ._baselines import BASELINE

NOISE_FLOOR = 0.02  # never call two settings different on less than this relative gap


@dataclass
class Candidate:
    """A setting measured again for the verdict."""

    trial: FrozenTrial
    labels: list[str]
    values: list[float] = field(default_factory=list)  # time per sample (ms) of each repeat
    memory_mb: list[float] = field(default_factory=list)
    cpu_percent: list[float] = field(default_factory=list)
    samples_per_s: list[float] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)  # the round of each value (default: 0, 1..)
    bottleneck: str = ""
    why: str = ""

    @property
    def workers(self) -> int:
        return int(
            next(
                (v for k, v in self.trial.params.items() if plain_key(k) == "loader.num_workers"), 0
            )
        )

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("inf")

    @property
    def spread(self) -> float:
        """Relative range of the repeats: (max - min) / median."""
        if len(self.values) < 2:
            return 0.0
        return (max(self.values) - min(self.values)) / self.median

    @property
    def name(self) -> str:
        return ", ".join(self.labels)


def candidates(trials: list[FrozenTrial], top: int) -> list[Candidate]:
    """The ``top`` fastest distinct settings plus every baseline that completed."""
    complete = [
        t
        for t in trials
        if t.state == TrialState.COMPLETE
        and t.value is not None
        and t.user_attrs.get("repeat_of") is None
    ]
    chosen: dict[int, Candidate] = {}
    for t in complete:
        label = t.user_attrs.get(BASELINE)
        if label:
            chosen.setdefault(t.number, Candidate(t, [])).labels.append(_LABELS.get(label, label))
    for rank, t in enumerate(sorted(complete, key=lambda t: float(t.value or 0.0))[:top], start=1):
        chosen.setdefault(t.number, Candidate(t, [])).labels.append(f"top {rank}")
    return sorted(chosen.values(), key=lambda c: c.trial.number)


_LABELS = {
    "default": "default (0 workers)",
    "rule_of_thumb": "rule of thumb (4 x CPUs, capped)",
    "start_small": "start at 2",
    "doubling": "doubling path",
    "model_guess": "model-based guess",
}


@dataclass
class Recommendation:
    """The cheapest setting within noise of the fastest, and how it compares."""

    chosen: Candidate
    fastest: Candidate
    tolerance: float
    speedups: dict[str, tuple[float, float, float]]  # label -> (median, low, high) ratios


def paired(a: Candidate, b: Candidate) -> list[float]:
    """``a``'s time over ``b``'s in each round both were measured in."""
    b_rounds = dict(zip(b.rounds or range(len(b.values)), b.values, strict=True))
    return [
        value / b_rounds[r]
        for r, value in zip(a.rounds or range(len(a.values)), a.values, strict=True)
        if r in b_rounds
    ]


COVERAGE = 0.75  # how sure the interval around a median ratio is to hold the true ratio


def median_interval(values: list[float]) -> tuple[float, float]:
    """An interval of order statistics that holds the true median with >= ``COVERAGE``.

    Distribution-free: ``[x_(k), x_(n-k+1)]`` covers the median with probability
    ``1 - 2 P(Binomial(n, 1/2) <= k - 1)``; the largest such ``k`` is used (the whole range
    for 3 to 5 values, the 2nd to 5th of 6), so the interval narrows as rounds are added.
    """
    xs = sorted(values)
    n = len(xs)
    k = 1
    while k + 1 <= (n + 1) // 2:
        tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n  # P(B <= k)
        if 1 - 2 * tail < COVERAGE:
            break
        k += 1
    return xs[k - 1], xs[n - k]


def compare(a: Candidate, b: Candidate) -> tuple[float, float, float, float]:
    """(median, low, high, noise) of ``a``'s time over ``b``'s.

    From the rounds' paired ratios when there are two or more: their median, their range,
    and as the noise how far below the median the true ratio may lie
    (:func:`median_interval`), at least ``NOISE_FLOOR``. Otherwise from the medians, the
    extremes of the repeats, and the larger relative range of the two.
    """
    ratios = paired(a, b)
    if len(ratios) >= 2:
        mid = statistics.median(ratios)
        low, _ = median_interval(ratios)
        return mid, min(ratios), max(ratios), max(mid - low, NOISE_FLOOR)
    noise = max(a.spread, b.spread, NOISE_FLOOR)
    return (
        a.median / b.median,
        min(a.values) / max(b.values),
        max(a.values) / min(b.values),
        noise,
    )


def _cost(c: Candidate) -> tuple[int, float]:
    return c.workers, statistics.median(c.memory_mb or [0.0])


def recommend(cands: list[Candidate]) -> Recommendation:
    """Cheapest (fewest workers, then least memory) whose time is within noise of the best.

    A setting is within noise of the fastest when the median of its round-by-round time
    ratios to the fastest, less the noise (down to the low end of :func:`median_interval`,
    at least ``NOISE_FLOOR``), is within ``NOISE_FLOOR`` of 1: the gap is not a measured
    difference.
    """
    measured = [c for c in cands if c.values]
    fastest = min(measured, key=lambda c: c.median)
    within = [(fastest, NOISE_FLOOR)]
    for c in measured:
        if c is fastest:
            continue
        ratio, _, _, noise = compare(c, fastest)
        if ratio - noise <= 1 + NOISE_FLOOR:
            within.append((c, noise))
    chosen, tolerance = min(within, key=lambda ct: _cost(ct[0]))
    speedups = {}
    for c in measured:
        for label in c.labels:
            if label.startswith("top"):
                continue
            mid, low, high, _ = compare(c, chosen)
            speedups[label] = (mid, low, high)
    return Recommendation(chosen, fastest, tolerance, speedups)


def unsure(cands: list[Candidate]) -> list[Candidate]:
    """The fastest and the cheaper settings too close to it to call, or [] if none.

    Too close to call: within noise of the fastest, yet slower than it by more than
    ``NOISE_FLOOR`` at the median. More rounds narrow the noise and settle it.
    """
    measured = [c for c in cands if c.values]
    if len(measured) < 2:
        return []
    fastest = min(measured, key=lambda c: c.median)
    close = []
    for c in measured:
        if c is fastest or _cost(c) >= _cost(fastest):
            continue
        ratio, _, _, noise = compare(c, fastest)
        if ratio > 1 + NOISE_FLOOR and ratio - noise <= 1 + NOISE_FLOOR:
            close.append(c)
    return [fastest, *close] if close else []


def loader_yaml(settings: dict[str, Any], header: list[str]) -> str:
    """``best_loader.yaml``: the loader group's keys, with where they came from as comments."""
    lines = [f"# {h}" for h in header]
    for key, value in settings.items():
        if value is None:
            text = "null"
        elif isinstance(value, bool):
            text = str(value).lower()
        else:
            text = str(value)
        lines.append(f"{key}: {text}")
    return "\n".join(lines) + "\n"


def verdict_markdown(
    rec: Recommendation,
    cands: list[Candidate],
    unit: str = "ms",
    guess: dict[str, Any] | None = None,
    workers_range: dict[str, Any] | None = None,
) -> str:
    """The verdict as a markdown table and sentences, for ``verdict.md`` and MLflow."""
    rows = [
        "| setting | num_workers | params | time per sample (median of repeats) | spread | "
        "samples/s | memory MB | CPU % | bottleneck |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in _ranked(cands):
        mark = " **recommended**" if c is rec.chosen else ""
        rows.append(
            f"| {c.name}{mark} | {c.workers} | {_params(c)} | {c.median:.4f} {unit} | "
            f"{c.spread:.1%} | {statistics.median(c.samples_per_s or [0]):,.0f} | "
            f"{statistics.median(c.memory_mb or [0]):,.0f} | "
            f"{statistics.median(c.cpu_percent or [0]):.0f} | {c.bottleneck} |"
        )
    lines = [headline(rec, unit), "", *rows, ""]
    lines += details(rec, cands, unit, guess, workers_range)
    return "\n".join(lines) + "\n"


def headline(rec: Recommendation, unit: str = "ms") -> str:
    """The recommendation in one sentence, with what "within noise" was."""
    return (
        f"**Recommended: num_workers={rec.chosen.workers}** (trial {rec.chosen.trial.number}): "
        f"the cheapest setting whose time per sample is within noise of the fastest "
        f"(trial {rec.fastest.trial.number}, {rec.fastest.median:.4f} {unit}): round by "
        f"round its time over the fastest's, less the noise ({rec.tolerance:.1%}: down to "
        f"the low end of a {COVERAGE:.0%} interval of those ratios), comes within "
        f"{NOISE_FLOOR:.0%} of 1."
    )


def details(
    rec: Recommendation,
    cands: list[Candidate],
    unit: str = "ms",
    guess: dict[str, Any] | None = None,
    workers_range: dict[str, Any] | None = None,
) -> list[str]:
    """Markdown lines under the table: speed-ups, what limits, the guess, the range."""
    text = [
        f"- speed-up over {label}: {mid:.2f}x (rounds ranged {low:.2f}x to {high:.2f}x)"
        for label, (mid, low, high) in rec.speedups.items()
    ]
    if rec.chosen.why:
        text += ["", f"What limits it: {rec.chosen.why}"]
    if guess:
        measured = next((c for c in cands if "model-based guess" in c.labels), None)
        line = (
            f"Model-based guess (from the 0-worker trial: {guess['load_ms_per_batch']:.1f} ms to "
            f"load a batch on {guess['cpu_share_of_loading']:.1f} cores, "
            f"{guess['step_ms']:.1f} ms a step on {guess.get('step_cpu_cores', 0.0):.1f} cores): "
            f"num_workers={guess['workers']} (bound: {guess['bound']}), predicted "
            f"{guess['time_per_sample_ms']:.4f} {unit}"
        )
        if measured is not None and measured.values:
            line += f", measured {measured.median:.4f} {unit}"
        text += ["", line + "."]
    if workers_range:
        low, high, _ = workers_range["written"]
        searched = workers_range["searched"]
        how = "widened" if searched > high else "narrowed"
        text += [
            "",
            f"The guess {how} the num_workers search range from {low}..{high} to "
            f"{low}..{searched}.",
        ]
    return text


def verdict_table(rec: Recommendation, cands: list[Candidate], unit: str = "ms") -> Any:
    """The candidates as a rich table narrow enough for an 80-column terminal."""
    from rich.table import Table

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


def _ranked(cands: list[Candidate]) -> list[Candidate]:
    return sorted((c for c in cands if c.values), key=lambda c: c.median)


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
