"""The decision: the cheapest setting shown as fast as the fastest, how sure, and why, in words.

Reads only the tuner's measures, so it is tested with synthetic figures. The pick and the
confidence rules are :mod:`loadertune.decision`'s, the sweep's too; AutoLoader names its
settings its own way and leaves out what only a sweep sees (other work on the machine, noise
pooled over the settings). The bottleneck label is :func:`loadertune.measure._diagnosis.diagnose`'s,
from the chosen setting's own probe segments.
"""

from __future__ import annotations

import statistics
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar

from loadertune import decision
from loadertune.autoloader._schedule import Measure, Setting, Tuner
from loadertune.decision import Assurance, Choice, Confidence
from loadertune.measure import MARGIN, Rounds, diagnose

K = TypeVar("K", bound=Hashable)  # what names a setting (a Setting, in a session)


@dataclass(frozen=True)
class Decision:
    """What AutoLoader settled on, against what it measured."""

    chosen: Setting
    fastest: Setting
    ratio: float  # chosen's time over the fastest's (median of rounds)
    may_cost: float  # how much slower than the fastest the chosen may be (top of 95% interval)
    assurance: Assurance[Setting]
    bottleneck: str = ""
    why: str = ""
    evidence: dict[str, float] = field(default_factory=dict)


def decide(tuner: Tuner, cpus: int) -> Decision:
    """Recommend from the interleaved rounds; without two settings compared, keep what ran."""
    times = tuner.compared()
    if len(times) >= 2:
        choice = decision.recommend(times, {s: s.cost for s in times})
        chosen, fastest = choice.chosen, choice.fastest
        assurance = assess(choice, times)
        ratio, may_cost = choice.ratio, choice.may_cost
    else:
        chosen = next(iter(times), None) or _fallback(tuner)
        fastest, ratio, may_cost = chosen, 1.0, 0.0
        why = "the others were dropped" if tuner.dropped else "tune_steps too low"
        assurance = Assurance(Confidence.LOW, f"Fewer than two settings were compared ({why}).")
    chosen = settle_setting(chosen, tuner)
    fastest = settle_setting(fastest, tuner)
    label, why, evidence = _diagnose(tuner.measures, chosen, cpus)
    return Decision(chosen, fastest, ratio, may_cost, assurance, label, why, evidence)


def assess(choice: Choice[K], times: Mapping[K, Rounds]) -> Assurance[K]:
    """How sure the choice is (:func:`loadertune.decision.findings`), in AutoLoader's words."""
    f = decision.findings(times, choice.chosen, choice.fastest)
    reasons = decision.shortfalls(f, "the choice was measured")
    if f.unsettled:
        most = max(f.unsettled.values())
        names = ", ".join(str(k) for k in f.unsettled)
        reasons.append(
            (Confidence.MEDIUM, f"{names} may still be faster by {decision.up_to(most)}")
        )
    high = (
        f"No other setting can be more than {MARGIN:.1%} faster (95% interval); "
        f"round-by-round ratios agree within {f.pairing:.0%}."
    )
    return decision.assurance(reasons, high, list(f.unsettled))


def settle_setting(s: Setting, tuner: Tuner) -> Setting:
    """The setting to keep for the rest of training: persistent workers unless fixed off."""
    return replace(s, persistent_workers=s.num_workers > 0).fixed(tuner.fixed)


def _fallback(tuner: Tuner) -> Setting:
    """Without comparisons: the model guess when there is one, else what last worked."""
    if tuner.guess is not None:
        w = tuner.guess.workers
        return Setting(w, 2 if w else None, w > 0, tuner.accelerator).fixed(tuner.fixed)
    return tuner.last_good()


def _same(a: Setting, b: Setting) -> bool:
    return replace(a, persistent_workers=False) == replace(b, persistent_workers=False)


def _diagnose(measures: list[Measure], chosen: Setting, cpus: int) -> tuple[str, str, dict]:  # type: ignore[type-arg]
    """:func:`~loadertune.measure._diagnosis.diagnose` on the chosen setting's segments.

    The wait share is that of their steady cycles (``Measure.counted``), as a sweep's is of
    its timed window: a segment's first batches wait for its workers' first loads, which
    is the probe's switching cost, not the setting's pace (on a 25 ms step with loading
    hidden, those first batches alone lifted the share past ``WAIT_LOW``, and the label to
    ``io-bound``). Segments too short for a steady cycle count whole.
    """

    mine = [m for m in measures if _same(m.setting, chosen) and not m.failed and m.steps]
    if not mine:
        return "", "", {}
    wall = sum(m.wait_s + m.step_s for m in mine)
    steady = sum(m.counted_s for m in mine)
    if steady:
        waited = sum(m.counted_wait_s for m in mine) / steady
    else:
        waited = sum(m.wait_s for m in mine) / wall if wall else 0.0
    d = diagnose(
        num_workers=chosen.num_workers,
        data_wait_fraction=waited,
        cpu_percent_mean=100.0 * sum(m.tree_cpu_s for m in mine) / wall if wall else 0.0,
        usable_cpus=cpus,
        copy_ms_mean=0.0,  # the copy is inside the training step, not seen apart
        step_time_ms_p50=statistics.median(m.per_batch_s for m in mine) * 1000,
        peak_memory_mb=max(m.peak_rss_mb for m in mine),
        cpu_wait_procs=_queued_procs(mine),
    )
    return d.label, d.sentence, d.evidence


def _queued_procs(mine: list[Measure]) -> float | None:
    """How many of the loader's processes were queued for a CPU, on average, over the
    segments' steady cycles (the sweep's ``cpu_wait_procs``); None without the figures."""
    read = [m for m in mine if m.queued_s is not None and m.counted_s > 0]
    steady = sum(m.counted_s for m in read)
    return sum(m.queued_s or 0.0 for m in read) / steady if steady else None


def probe_rows(tuner: Tuner) -> list[dict[str, object]]:
    """One row per setting measured: rounds, median time per batch, wait share, start-up."""
    rows: dict[Setting, list[Measure]] = {}
    for m in tuner.measures:
        rows.setdefault(m.setting, []).append(m)
    out = []
    for s, ms in rows.items():
        ok = [m for m in ms if not m.failed and m.steps]
        out.append(
            {
                "setting": s.name,
                "segments": len(ms),
                "steps": sum(m.steps for m in ms),
                "ms_per_batch": 1000 * statistics.median(m.per_batch_s for m in ok) if ok else 0.0,
                "wait_share": statistics.median(m.wait_share for m in ok) if ok else 0.0,
                "startup_s": statistics.median(m.startup_s for m in ms),
                "peak_rss_mb": max(m.peak_rss_mb for m in ms),
                "failed": tuner.dropped.get(s, ""),
                "far_behind": tuner.far_behind.get(s, ""),
            }
        )
    return out


def _note(row: dict[str, object], chosen: str) -> str:
    """The row's note: chosen, or why it stopped being measured (never both)."""
    if row["setting"] == chosen:
        return "chosen"
    if row["failed"]:
        return f"dropped: {row['failed']}"
    return f"far behind: {row['far_behind']}" if row["far_behind"] else ""


def report_text(decision: Decision | None, tuner: Tuner) -> str:
    """What was tried, measured and why the choice: a few lines for a terminal or a log."""
    lines = []
    if tuner.guess is not None:
        g = tuner.guess
        lines.append(
            f"guess: {g.workers} workers ({g.bound.value}): load {g.load_ms_per_batch:.1f} "
            f"ms/batch on {g.cpu_share_of_loading:.1f} cores, step {g.step_ms:.1f} ms on "
            f"{g.step_cpu_cores:.1f} cores"
        )
    chosen = decision.chosen.name if decision is not None else ""
    lines.append("setting      steps  ms/batch  wait  start-up  peak MB  note")
    for r in probe_rows(tuner):
        lines.append(
            f"{r['setting']:<12} {r['steps']:>5}  {r['ms_per_batch']:>8.2f}  "
            f"{r['wait_share']:>4.0%}  {r['startup_s']:>7.2f}s  {r['peak_rss_mb']:>7.0f}  "
            f"{_note(r, chosen)}"
        )
    if decision is None:
        lines.append("still tuning")
        return "\n".join(lines)
    d = decision
    lines += [_head(d, tuner), f"confidence: {d.assurance.level}. {d.assurance.why}"]
    if d.bottleneck:
        lines.append(f"bottleneck: {d.bottleneck}: {d.why}")
    return "\n".join(lines)


def _head(d: Decision, tuner: Tuner) -> str:
    """How the choice was made, in the words its measurements allow."""
    if len(tuner.compared()) < 2:
        measured = {m.setting.name for m in tuner.measures if m.steps and not m.failed}
        if d.chosen.name in measured:
            how = "the only setting measured"
        else:
            how = "not measured: the model guess" if tuner.guess else "not measured: the default"
        return f"chosen: {d.chosen.name} ({how}; no two settings were compared)"
    if _same(d.chosen, d.fastest):
        return f"chosen: {d.chosen.name} (fastest measured)"
    return (
        f"chosen: {d.chosen.name}, the cheapest shown as fast as the fastest "
        f"{d.fastest.name} ({d.ratio - 1:+.1%} at the median, at most {d.may_cost:+.1%})"
    )
