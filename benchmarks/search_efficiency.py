"""Search efficiency: the default study against an exhaustive grid, on scenarios with
different bottlenecks.

For each scenario it runs, on one machine, one after the other:

1. the grid: every ``num_workers`` (0 .. G) x ``prefetch_factor`` (1, 2, 4, 8) point once,
   in full (no pruner), with G = max(--max-workers, the default range's bound of 2 x CPUs);
2. the default study (``loadertune -m`` with the default search space: TPE, baselines,
   model-based guess that may re-range ``num_workers``, verdict) with a third of the grid's
   trials;
3. a re-measurement, interleaved (A B C ... A B C ...), of every grid ``num_workers`` at its
   fastest grid ``prefetch_factor`` and of the study's recommendation, ``--repeats`` times.
   Single grid trials are noisy, and the grid's minimum is biased low (the luckiest of many
   draws), so the comparison uses these medians.

It reports the grid's cost, the study's cost, how many trials and seconds the study needed
to first measure a setting within 5% of the grid's best (its ``num_workers`` judged by the
re-measured medians), the recommendation's throughput against the grid's best (target >= 0.95), the
recommended ``num_workers`` against the smallest grid setting within noise of the best
(target: never more), and the model-based guess against both.

    .venv/bin/python benchmarks/search_efficiency.py [--scenarios compute,cpu,io] [--repeats 3]
        [--outputs DIR]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import SCENARIOS, compose_run_config, multirun

COMMON = ["tracking.enabled=false"]
WITHIN = 0.05  # "within 5% of the grid's best"
NOISE_FLOOR = 0.02  # the verdict's floor for "within noise"


def run(out: Path, name: str, args: list[str]) -> float:
    """``loadertune -m`` in ``out`` (sweep dir ``out/<name>``); its wall time in seconds.

    A run that finished before in ``out`` (``--outputs``) is not run again: its wall time is
    read back from ``<name>.seconds``.
    """
    done = out / f"{name}.seconds"
    if done.exists():
        return float(done.read_text())
    proc, elapsed = multirun(
        out, [f"hydra.sweeper.study_name={name}", f"hydra.sweep.dir={out / name}", *args]
    )
    if proc.returncode:
        sys.exit(f"{name} failed:\n{proc.stderr[-3000:]}")
    (out / f"{name}.log").write_text(proc.stdout)
    done.write_text(f"{elapsed:.1f}")
    return elapsed


def study_of(out: Path, name: str) -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name=name, storage=f"sqlite:///{out}/optuna.db")


def workers(t: Any) -> int:
    return int(t.params.get("loader.num_workers", 0))


def loader_overrides(num_workers: int, prefetch: int | None) -> list[str]:
    out = [f"loader.num_workers={num_workers}"]
    if num_workers > 0 and prefetch is not None:
        out.append(f"loader.prefetch_factor={prefetch}")
    return out


def remeasure(
    out: Path, base: list[str], settings: dict[str, list[str]], repeats: int
) -> dict[str, list[float]]:
    """Each setting's time per sample, ``repeats`` times, interleaved across settings.

    Kept in ``out/remeasured.json`` and read back on a later run with the same settings.
    """
    import json

    from loadertune import run_trial

    cache = out / "remeasured.json"
    if cache.exists():
        kept = json.loads(cache.read_text())
        same = all(kept["settings"].get(name) == extra for name, extra in settings.items())
        if same and kept["repeats"] == repeats:
            return {name: kept["values"][name] for name in settings}

    configs = {
        name: compose_run_config([*base, f"paths.output_root={out}", *extra])
        for name, extra in settings.items()
    }
    values: dict[str, list[float]] = {name: [] for name in settings}
    for _ in range(repeats):
        for name, config in configs.items():
            values[name].append(run_trial(config).objective)
    cache.write_text(json.dumps({"settings": settings, "repeats": repeats, "values": values}))
    return values


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def scenario(key: str, max_workers: int, repeats: int, outputs: Path | None) -> dict[str, Any]:
    from omegaconf import OmegaConf

    from loadertune.machine import usable_cpus

    if outputs is not None:
        out = outputs / key
        out.mkdir(parents=True, exist_ok=True)
    else:
        out = Path(tempfile.mkdtemp(prefix=f"loadertune-search-{key}-"))
    top = max(max_workers, 2 * usable_cpus())
    base = [*SCENARIOS[key], *COMMON]
    grid_space = [
        f"loader.num_workers=range(0,{top + 1})",
        "loader.prefetch_factor=choice(1,2,4,8)",
    ]
    grid_wall = run(
        out,
        "grid",
        [
            *base,
            *grid_space,
            "hydra.sweeper.sampler=grid",
            "hydra.sweeper.pruner=none",  # every grid point measured in full
            "hydra.sweeper.n_trials=1000",
            "hydra.sweeper.verdict_repeats=0",  # the re-measurement below judges the grid
        ],
    )
    grid = [t for t in study_of(out, "grid").trials if t.value is not None]
    measured = [t for t in grid if t.user_attrs.get("repeat_of") is None]
    budget = math.ceil(len(measured) / 3)
    study_wall = run(out, "study", [*base, f"hydra.sweeper.n_trials={budget}"])
    study = study_of(out, "study")
    rec = OmegaConf.load(out / "study" / "best_loader.yaml")

    # Every grid num_workers at its fastest grid prefetch_factor, and the recommendation.
    fastest: dict[int, Any] = {}
    for t in grid:
        if workers(t) not in fastest or t.value < fastest[workers(t)].value:
            fastest[workers(t)] = t
    settings = {
        f"grid w={w}": loader_overrides(w, t.params.get("loader.prefetch_factor"))
        for w, t in sorted(fastest.items())
    }
    recommended = loader_overrides(int(rec.num_workers), rec.prefetch_factor)
    # The same setting is measured once: a grid point the study recommends is that point.
    rec_name = next((n for n, extra in settings.items() if extra == recommended), "recommended")
    settings.setdefault(rec_name, recommended)
    values = remeasure(out, base, settings, repeats)
    medians = {name: statistics.median(v) for name, v in values.items()}
    grid_medians = {w: medians[f"grid w={w}"] for w in fastest}
    best_w = min(grid_medians, key=lambda w: grid_medians[w])
    best = grid_medians[best_w]
    noise = max(NOISE_FLOOR, spread(values[f"grid w={best_w}"]))
    smallest = min(
        w
        for w in grid_medians
        if grid_medians[w] <= best * (1 + max(noise, spread(values[f"grid w={w}"])))
    )

    # When the study first measured a setting whose num_workers is, by the re-measured
    # medians, within 5% of the grid's best (single trial values are too noisy to judge by).
    good = {w for w, m in grid_medians.items() if m <= best * (1 + WITHIN)}
    trials = [t for t in study.trials if t.datetime_complete is not None]
    reached = next(
        (i + 1 for i, t in enumerate(trials) if t.value is not None and workers(t) in good),
        None,
    )
    reached_s = (
        round((trials[reached - 1].datetime_complete - trials[0].datetime_start).total_seconds())
        if reached
        else None
    )
    guess = study.user_attrs.get("guess", {})
    ranged = study.user_attrs.get("workers_range")
    guess_w = guess.get("workers")
    return {
        "scenario": key,
        "grid trials": len(measured),
        "grid s": round(grid_wall),
        "study trials": len(trials),
        "study s (incl. verdict)": round(study_wall),
        "trials to within 5%": reached,
        "s to within 5%": reached_s,
        "grid best w (ms/sample)": f"{best_w} ({best:.3f})",
        "smallest w within noise": f"{smallest} (±{noise:.1%})",
        "recommended w": int(rec.num_workers),
        "recommended / best throughput": round(best / medians[rec_name], 3),
        "guess w (predicted ms/sample)": (
            f"{guess_w} ({guess['time_per_sample_ms']:.3f})" if guess else "none"
        ),
        "guess / best throughput": (
            round(best / grid_medians[guess_w], 3) if guess_w in grid_medians else "n/a"
        ),
        "range searched": (f"0..{ranged['searched']}" if ranged else "as written"),
        "repeats (ms/sample)": "; ".join(
            f"{name}: {', '.join(f'{v:.3f}' for v in vs)}" for name, vs in values.items()
        ),
        "outputs": str(out),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="compute,cpu,io")
    parser.add_argument("--max-workers", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--outputs",
        type=Path,
        default=None,
        help="folder for the scenarios' stores (default: new temporary folders); sweeps "
        "that finished there before are reused, not run again",
    )
    args = parser.parse_args()
    rows = []
    for key in args.scenarios.split(","):
        rows.append(scenario(key, args.max_workers, args.repeats, args.outputs))
        print(rows[-1], flush=True)
    keys = [k for k in rows[0] if k not in ("repeats (ms/sample)", "outputs")]
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in keys) + " |")
    for row in rows:
        print(f"\n{row['scenario']} ({row['outputs']}): {row['repeats (ms/sample)']}")


if __name__ == "__main__":
    main()
