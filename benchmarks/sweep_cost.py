"""What the default sweep costs, against an exhaustive grid of the same space.

1. The default study: ``loadertune -m`` (baselines, guess, search, verdict) in a fresh
   temporary outputs folder. From its stores: wall time, trials, distinct settings measured
   (trial processes started), repeats answered, pruned trials, MLflow child runs, the
   verdict's rounds, and the fixed cost per trial outside its timed window (the trial
   process's recorded wall time, ``wall_s``, less its window, ``window_s``, over the complete
   trials; and the older figure, the gap between trial starts less ``measure_s``).
2. The grid: every setting of the space as written (``num_workers`` 0 .. 2 x CPUs, each
   ``prefetch_factor`` of the default space with workers), measured ``--repeats`` times in
   interleaved rounds (A B C ... A B C ...), ``trial.steps`` steps each, no pruning, in this
   process (torch imported once): its wall time, and each setting's median.
3. The study's recommendation against the grid's best (the grid's medians, so both were
   measured side by side), and the pruned settings the grid puts within 5% of its best.

    .venv/bin/python benchmarks/sweep_cost.py [--repeats 3] [--no-grid] [override ...]
    .venv/bin/python benchmarks/sweep_cost.py --analyse OUTPUT_ROOT   # a finished sweep
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import compose_run_config, multirun

NEAR = 0.05  # a setting within this of the grid's best is "within noise" of it


def study_figures(out: Path) -> dict[str, Any]:
    """The default study's figures, read back from its Optuna and MLflow stores."""
    import optuna
    from mlflow import MlflowClient

    storage = f"sqlite:///{out}/optuna.db"
    (name,) = optuna.get_all_study_names(storage)
    study = optuna.load_study(study_name=name, storage=storage)
    trials = [t for t in study.trials if t.state.is_finished()]
    measured = [t for t in trials if "repeat_of" not in t.user_attrs and "wall_s" in t.user_attrs]
    client = MlflowClient(f"sqlite:///{out}/mlflow.db")
    runs = client.search_runs(["1"], max_results=1000)
    children = [r for r in runs if r.data.tags.get("loadertune.kind") == "trial"]
    # Before repeats stopped being child runs, each carried the figures it repeated.
    own = [r for r in children if "repeat_of" not in r.data.tags]
    (parent,) = [r for r in runs if r.data.tags.get("loadertune.kind") == "sweep"]
    window = {
        int(r.data.tags["optuna.trial_number"]): r.data.metrics["window_s"]
        for r in own
        if "window_s" in r.data.metrics and r.data.tags.get("optuna.state") == "COMPLETE"
    }
    outside = [
        float(t.user_attrs["wall_s"]) - window[t.number] for t in measured if t.number in window
    ]
    measure_s = {}
    for r in own:
        if int(r.data.tags["optuna.trial_number"]) in window:
            path = client.download_artifacts(r.info.run_id, "trial_result.json", str(out))
            measure_s[int(r.data.tags["optuna.trial_number"])] = json.loads(Path(path).read_text())[
                "measure_s"
            ]
    gaps = [
        (cur.datetime_start - prev.datetime_start).total_seconds() - measure_s[prev.number]
        for prev, cur in itertools.pairwise(trials)
        if prev.number in measure_s and prev.datetime_start and cur.datetime_start
    ]
    # The fixed cost, split: the trial process's own (fork, dataset and model, exit) and the
    # loop's (first batch, warm-up steps) before its window.
    process = [
        float(t.user_attrs["wall_s"]) - measure_s[t.number]
        for t in measured
        if t.number in measure_s
    ]
    warming = [measure_s[n] - window[n] for n in measure_s if n in window]
    rec = _results(out).get("recommended") or {}
    return {
        "process": process,
        "warming": warming,
        "trials": len(trials),
        "measured": measured,
        "distinct": len({json.dumps(t.params, sort_keys=True) for t in measured}),
        "repeats": sum("repeat_of" in t.user_attrs for t in trials),
        "pruned": [t for t in measured if t.state.name == "PRUNED"],
        "children": len(children),
        "repeats_answered": parent.data.metrics.get("repeats_answered"),
        "rounds": parent.data.metrics.get("verdict_rounds"),
        "outside": outside,
        "gaps": gaps,
        "recommended": rec,
    }


def _results(out: Path) -> dict[str, Any]:
    import yaml

    (path,) = out.glob("multirun/*/*/optimization_results.yaml")
    data = yaml.safe_load(path.read_text())
    return data if isinstance(data, dict) else {}


def grid(overrides: list[str], out: Path, repeats: int) -> tuple[dict[str, float], float]:
    """Every setting of the written space, ``repeats`` interleaved rounds: each setting's
    median time per sample (ms), keyed like Optuna params, and the grid's wall time (s)."""
    from loadertune import run_trial
    from loadertune.machine import cpus_per_rank

    settings = [{"loader.num_workers": 0}] + [
        {"loader.num_workers": w, "loader.prefetch_factor": p}
        for w in range(1, 2 * cpus_per_rank(1) + 1)
        for p in (1, 2, 4, 8)
    ]
    times: dict[str, list[float]] = {}
    start = time.perf_counter()
    for round_ in range(repeats):
        order = settings[round_ % len(settings) :] + settings[: round_ % len(settings)]
        for s in order:
            lines = [f"{k}={v}" for k, v in s.items()]
            config = compose_run_config(
                [f"paths.output_root={out}", "trial.precision=null", *overrides, *lines]
            )
            times.setdefault(json.dumps(s, sort_keys=True), []).append(run_trial(config).objective)
        print(f"grid round {round_ + 1}: {time.perf_counter() - start:.1f} s so far", flush=True)
    wall = time.perf_counter() - start
    return {k: statistics.median(v) for k, v in times.items()}, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-grid", action="store_true")
    parser.add_argument("--analyse", type=Path, help="a finished sweep's output root instead")
    args, overrides = parser.parse_known_args()
    if args.analyse is not None:
        out, wall, args.no_grid = args.analyse, float("nan"), True
    else:
        out = Path(tempfile.mkdtemp(prefix="loadertune-bench-"))
        proc, wall = multirun(out, ["hydra.sweeper.study_name=bench", *overrides])
        if proc.returncode:
            raise SystemExit(proc.stderr[-4000:])
    f = study_figures(out)
    print(f"overrides: {' '.join(overrides) or '(defaults)'}; outputs in {out}", flush=True)
    print(
        f"default study: {wall:.1f} s wall (dataset generation and the verdict included), "
        f"{f['trials']} trials: {f['distinct']} distinct settings measured in "
        f"{len(f['measured'])} trial processes ({len(f['pruned'])} pruned), {f['repeats']} "
        f"repeats answered (parent run: {f['repeats_answered']}), {f['children']} MLflow child "
        f"runs, verdict rounds {f['rounds']}"
    )
    if f["outside"]:
        print(
            f"fixed cost per trial outside its timed window (wall_s - window_s, complete "
            f"trials): median {statistics.median(f['outside']):.2f} s, max "
            f"{max(f['outside']):.2f} s over {len(f['outside'])}"
        )
    if f["process"]:
        print(
            f"  of which the trial process (wall_s - measure_s: fork, dataset, model, exit): "
            f"median {statistics.median(f['process']):.2f} s; first batch and warm-up steps "
            f"(measure_s - window_s): median {statistics.median(f['warming']):.2f} s"
        )
    if f["gaps"]:
        print(
            f"gap between trial starts less measure_s: median {statistics.median(f['gaps']):.2f}"
            f" s, max {max(f['gaps']):.2f} s over {len(f['gaps'])}"
        )
    rec = f["recommended"]
    print(f"recommended: {rec.get('params')} ({rec.get('confidence')})", flush=True)
    if args.no_grid:
        return
    medians, grid_wall = grid(overrides, out / "grid", args.repeats)
    best_key = min(medians, key=lambda k: medians[k])
    print(
        f"grid: {len(medians)} settings x {args.repeats} interleaved rounds = "
        f"{len(medians) * args.repeats} measurements, {grid_wall:.1f} s; best {best_key} at "
        f"{medians[best_key]:.4f} ms/sample; study/grid wall = {wall / grid_wall:.2f}"
    )
    params = {k: v for k, v in (rec.get("params") or {}).items() if k.startswith("loader.")}
    if params.get("loader.num_workers") == 0:
        params = {"loader.num_workers": 0}
    key = json.dumps({k: params[k] for k in sorted(params)}, sort_keys=True)
    if key in medians:
        print(
            f"recommendation's throughput / grid's best: {medians[best_key] / medians[key]:.3f}"
            f" (grid medians: {medians[key]:.4f} against {medians[best_key]:.4f} ms/sample)"
        )
    near = [
        t.params
        for t in f["pruned"]
        if medians.get(json.dumps(t.params, sort_keys=True), float("inf"))
        <= (1 + NEAR) * medians[best_key]
    ]
    print(f"pruned settings within {NEAR:.0%} of the grid's best: {len(near)} {near}")


if __name__ == "__main__":
    main()
