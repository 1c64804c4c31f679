"""A user's own step and collate: the default study against an exhaustive ``num_workers`` grid.

The workload is ``examples/varlen``: variable-length token sequences whose every read waits
``--read-ms`` (a sleep: read latency, no CPU), padded per batch by ``pad_collate``, under a
``model=custom`` step of ``--step-ms`` that holds no CPU (``varlen.train.accelerator_step``,
as a GPU step leaves the host free). On one machine, one after the other:

1. the grid: every ``num_workers`` from 0 to G (``prefetch_factor`` left at PyTorch's 2), each
   measured in full (no pruner, no verdict);
2. the default study (``loadertune -m`` with the default search space, baselines, guess and
   verdict), with the same step and collate;
3. a re-measurement, interleaved (A B C ... A B C ...), of every grid setting and of the
   study's recommendation, ``--repeats`` times (``search_efficiency.remeasure``).

It prints the recommendation's throughput against the grid's best (target >= 0.95) and its
``num_workers`` against the smallest grid setting within noise of the best (target: not
more), with the load average before and after, since this machine is shared. "Within noise"
is judged two ways: as in ``search_efficiency.py`` (medians, each setting's max-min spread),
and paired round by round as the verdict does (each round's ratio to the best setting; within
noise when a ~95% interval of the median ratio reaches below 1 + 2%), which one outlier round
on a busy machine cannot swing::

    .venv/bin/python benchmarks/custom_step.py [--read-ms 0.5] [--step-ms 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import ROOT
from search_efficiency import NOISE_FLOOR, loader_overrides, remeasure, run, spread, study_of

from loadertune.config import DEFAULT_PREFETCH_FACTOR

EXAMPLES = ROOT / "examples"


def workload(read_ms: float, step_ms: float) -> list[str]:
    """The overrides of the varlen workload: user Dataset, collate and step."""
    return [
        "dataset=custom",
        "dataset._target_=varlen.data.VarLenTokens",
        f"+dataset.read_ms={read_ms}",
        "model=custom",
        "model._target_=varlen.train.accelerator_step",
        f"+model.step_ms={step_ms}",
        "loader.collate_fn=varlen.data.pad_collate",
        "loader.batch_size=16",
        "tracking.enabled=false",
    ]


def load() -> str:
    """The 1, 5 and 15 minute load averages, as ``uptime`` shows them."""
    return ", ".join(f"{v:.2f}" for v in os.getloadavg())


def compare(out: Path, base: list[str], top: int, repeats: int) -> dict[str, Any]:
    """Grid, study, interleaved re-measurement; the figures that judge the recommendation."""
    from omegaconf import OmegaConf

    grid_s = run(
        out,
        "grid",
        [
            *base,
            f"loader.num_workers=range(0,{top + 1})",
            "hydra.sweeper.sampler=grid",
            "hydra.sweeper.pruner=none",
            "hydra.sweeper.n_trials=100",
            "hydra.sweeper.verdict_repeats=0",
        ],
    )
    study_s = run(out, "study", base)
    rec = OmegaConf.load(out / "study" / "best_loader.yaml")
    settings = {f"grid w={w}": loader_overrides(w, None) for w in range(top + 1)}
    # PyTorch's default prefetch_factor is 2: the grid's points have it, so a recommendation
    # with 2 is that grid point and is measured once, as that point.
    prefetch = None if rec.prefetch_factor == DEFAULT_PREFETCH_FACTOR else rec.prefetch_factor
    recommended = loader_overrides(int(rec.num_workers), prefetch)
    rec_name = next((n for n, extra in settings.items() if extra == recommended), "recommended")
    settings.setdefault(rec_name, recommended)
    values = remeasure(out, base, settings, repeats)
    medians = {name: statistics.median(v) for name, v in values.items()}
    grid = {w: medians[f"grid w={w}"] for w in range(top + 1)}
    best_w = min(grid, key=lambda w: grid[w])
    noise = max(NOISE_FLOOR, spread(values[f"grid w={best_w}"]))
    smallest = min(
        w for w in grid if grid[w] <= grid[best_w] * (1 + max(noise, spread(values[f"grid w={w}"])))
    )
    paired = smallest_paired(values, [f"grid w={w}" for w in range(top + 1)], f"grid w={best_w}")
    trials = [t for t in study_of(out, "study").trials if t.datetime_complete is not None]
    return {
        "grid s": round(grid_s),
        "study trials": len(trials),
        "study s (incl. verdict)": round(study_s),
        "grid best w (ms/sample)": f"{best_w} ({grid[best_w]:.3f})",
        "smallest w within noise (spread)": f"{smallest} (±{noise:.1%})",
        "smallest w within noise (paired)": paired,
        "recommended w": f"{int(rec.num_workers)} (prefetch {rec.prefetch_factor})",
        "recommended / best throughput": round(grid[best_w] / medians[rec_name], 3),
        "throughput target met (>= 0.95)": grid[best_w] / medians[rec_name] >= 0.95,
        "workers target met (<= smallest, spread / paired)": (
            f"{int(rec.num_workers) <= smallest} / {int(rec.num_workers) <= paired}"
        ),
        "repeats (ms/sample)": "; ".join(
            f"{n}: {', '.join(f'{v:.3f}' for v in vs)}" for n, vs in values.items()
        ),
        "outputs": str(out),
    }


def smallest_paired(values: dict[str, list[float]], grid: list[str], best: str) -> int:
    """The fewest workers whose round-by-round ratio to ``best`` is not a measured gap.

    A ratio's median minus a robust ~95% half-width (1.96 x 1.253 x 1.4826 x MAD / sqrt(n):
    the median's standard error from the median absolute deviation) at or under 1.02 is
    within noise (the verdict never calls a gap under 2% one).
    """
    for w, name in enumerate(grid):
        ratios = [a / b for a, b in zip(values[name], values[best], strict=True)]
        mid = statistics.median(ratios)
        mad = statistics.median(abs(r - mid) for r in ratios)
        half = 1.96 * 1.253 * 1.4826 * mad / len(ratios) ** 0.5
        if mid - half <= 1 + NOISE_FLOOR:
            return w
    return len(grid) - 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--read-ms", type=float, default=0.5)
    parser.add_argument("--step-ms", type=float, default=4.0)
    parser.add_argument("--max-workers", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--outputs", type=Path, default=None, help="reuse finished sweeps")
    args = parser.parse_args()
    sys.path.insert(0, str(EXAMPLES))  # the user's package, here and in the sweeps
    os.environ["PYTHONPATH"] = os.pathsep.join([str(EXAMPLES), os.environ.get("PYTHONPATH", "")])
    from loadertune.machine import usable_cpus

    out = args.outputs or Path(tempfile.mkdtemp(prefix="loadertune-custom-step-"))
    out.mkdir(parents=True, exist_ok=True)
    top = max(args.max_workers, 2 * usable_cpus())
    before = load()
    row = compare(out, workload(args.read_ms, args.step_ms), top, args.repeats)
    row = {"load before": before, **row, "load after": load()}
    for key, value in row.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
