"""The verdict in MLflow and in the results file: the recommendation is the headline.

The parent run names the recommendation (params ``recommended.loader.<key>``, metrics
``recommended_time_per_sample_ms``, ``recommended_samples_per_s``, ``recommended_trial_number``);
each candidate's child run carries its verdict figures (``verdict_rank``,
``verdict_time_per_sample_ms`` ..., and ``verdict_round_time_per_sample_ms``, one value per
round with the round as its step), and the recommended one is tagged ``recommended=true``.
A setting a verdict round of which failed is tagged ``verdict.failed`` (why, which round) on
its child run and named in the parent's ``verdict.failed``: it is never the pick.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from loadertune._lazy import mlflow_entities
from loadertune.config import plain_key
from loadertune.measure import TOLERANCE
from loadertune.record import param_text

from .._keys import Recommended, Tag
from ..verdict._text import failed_sentences

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from loadertune.decision import Guess

    from ..verdict._candidates import Candidate
    from ..verdict._rounds import Verdict


class SweepRuns(Protocol):
    """What the verdict needs of the sweep's MLflow record: its client, its parent run, and
    the child run of a trial (``_mlflow_runs.SweepRecorder`` is one)."""

    enabled: bool
    parent_id: str | None

    @property
    def client(self) -> MlflowClient: ...

    def run_of(self, number: int) -> str | None: ...


def recommended_block(verdict: Verdict, sweep_dir: Path) -> dict[str, Any]:
    """The ``recommended:`` block of ``optimization_results.yaml``: the settings, the
    verdict's figures for them, how sure, which trial, and where they were written."""
    chosen = verdict.rec.chosen
    return {
        Recommended.TRIAL_NUMBER: chosen.trial.number,
        Recommended.PARAMS: {plain_key(k): v for k, v in chosen.trial.params.items()},
        Recommended.LOADER: dict(verdict.settings),
        Recommended.TIME_PER_SAMPLE_MS: chosen.median,
        Recommended.SAMPLES_PER_S: _median(chosen.samples_per_s),
        Recommended.REPEATS: len(chosen.values),
        Recommended.CONFIDENCE: verdict.assurance.level.value,
        Recommended.CONFIDENCE_WHY: verdict.assurance.why,
        Recommended.WRITTEN_TO: [str(sweep_dir / "best_loader.yaml"), str(verdict.loader_file)],
    }


def log_verdict(
    recorder: SweepRuns, verdict: Verdict, sweep_dir: Path, guess: Guess | None = None
) -> None:
    """The verdict on the parent run and on each candidate's child run.

    Parent: ``recommended.*`` (above), ``verdict_tolerance`` (the slowdown accepted for a
    cheaper pick), ``verdict_may_cost`` (how much slower than the fastest the pick may be),
    ``verdict_noise`` (the noise measured), ``verdict_rounds`` (the rounds it needed),
    ``verdict_ceiling_workers`` (where the pick was held to a ceiling's count), the
    tags ``verdict.*`` (confidence, why, what limits it), the model-based guess against its
    measurement (``guess_num_workers``, ``guess_time_per_sample_ms``,
    ``guess_measured_time_per_sample_ms``), verdict.md, best_loader.yaml and verdict.png.
    """
    if not recorder.enabled or recorder.parent_id is None:
        return

    rec, assurance, c = verdict.rec, verdict.assurance, verdict.rec.chosen
    now = int(time.time() * 1000)
    figures = {
        "recommended_time_per_sample_ms": c.median,
        "recommended_trial_number": float(c.trial.number),
        "verdict_tolerance": TOLERANCE,
        "verdict_may_cost": rec.may_cost,
        "verdict_noise": rec.noise,
        "verdict_rounds": float(verdict.rounds),
    } | ({"recommended_samples_per_s": _median(c.samples_per_s)} if c.samples_per_s else {})
    if rec.ceiling is not None:  # held to the workers the search's ceiling found enough
        figures["verdict_ceiling_workers"] = float(rec.ceiling)
    if guess:
        figures["guess_num_workers"] = float(guess.workers)
        figures["guess_time_per_sample_ms"] = guess.time_per_sample_ms
    if verdict.guess_measured_ms is not None:
        figures["guess_measured_time_per_sample_ms"] = verdict.guess_measured_ms
    tags = {
        "verdict.num_workers": str(c.workers),
        "verdict.trial": str(c.trial.number),
        "verdict.bottleneck": c.bottleneck,
        "verdict.why": c.why,
        "verdict.confidence": assurance.level.value,
        "verdict.confidence_why": assurance.why,
        Tag.NOTE: verdict.markdown,
    }
    if assurance.settle:
        tags["verdict.settle"] = assurance.settle
    if failed := failed_sentences(verdict.cands):
        tags["verdict.failed"] = "; ".join(failed)
    if guess:
        tags["guess.bound"] = guess.bound.value
    recorder.client.log_batch(
        recorder.parent_id,
        metrics=[mlflow_entities.Metric(k, float(v), now, 0) for k, v in figures.items()],
        params=[
            mlflow_entities.Param(f"recommended.loader.{k}", param_text(v))
            for k, v in verdict.settings.items()
        ],
        tags=[mlflow_entities.RunTag(k, v[:5000] if k != Tag.NOTE else v) for k, v in tags.items()],
    )
    for name in ("verdict.md", "best_loader.yaml", "verdict.png"):
        recorder.client.log_artifact(recorder.parent_id, str(sweep_dir / name))
    _mark_children(recorder, verdict.cands, c, now)


def _mark_children(
    recorder: SweepRuns, cands: list[Candidate], chosen: Candidate, now: int
) -> None:
    """Each measured candidate's child run gets its verdict figures; the pick, its tag."""
    measured = sorted((c for c in cands if c.values), key=lambda c: c.median)
    measured += [c for c in cands if c.failed and not c.values]  # failed its every round
    for rank, c in enumerate(measured, start=1):
        run_id = recorder.run_of(c.trial.number)
        if run_id is None:
            continue
        figures = {
            "verdict_rank": float(rank),
            "verdict_time_per_sample_ms": c.median,
            "verdict_spread": c.spread,
            "verdict_repeats": float(len(c.values)),
            "verdict_failed_rounds": float(len(c.failed)),
        }
        if not c.values:
            figures = {"verdict_failed_rounds": float(len(c.failed))}
        if c.samples_per_s:
            figures["verdict_samples_per_s"] = _median(c.samples_per_s)
        tags = [mlflow_entities.RunTag("verdict.role", c.name)]
        if c.failed:  # never the pick: a round of it failed
            tags.append(mlflow_entities.RunTag("verdict.failed", c.failed_why))
        if c is chosen:  # by this sweep: the run may sit under an earlier sweep's parent
            tags += [
                mlflow_entities.RunTag(Tag.RECOMMENDED, "true"),
                mlflow_entities.RunTag("recommended.by", str(recorder.parent_id)),
            ]
        metrics = [mlflow_entities.Metric(k, v, now, 0) for k, v in figures.items()]
        metrics += [  # the repeats themselves, a series over the rounds (step = round)
            mlflow_entities.Metric("verdict_round_time_per_sample_ms", v, now, r)
            for r, v in c.by_round.items()
        ]
        recorder.client.log_batch(run_id, metrics=metrics, tags=tags)


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0
