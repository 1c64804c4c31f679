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
3. The study's recommendation against the grid's best: by the grid's medians, and, where the
   two differ, by ``--remeasure`` further rounds of just those two side by side (a grid of
   three rounds carries the machine's scatter); and the pruned settings the grid puts within
   5% of its best.

``--workloads compute,cpu,io`` does all of it for each workload of ``_common.SCENARIOS`` (a
latency-bound read, CPU-bound decoding, the default compute-bound one) in one run, and ends
with a table of the three. Where the study's guess widened ``num_workers`` past the written
range, the grid covers the widened range too, so the study's pick is one of its points.
``object_store`` (8 ms a read at almost no CPU, batch 32, a 10 ms step: dozens of workers)
has a grid of its own, chosen apart from any study (``_common.GRIDS``: 0 to 48 workers at
PyTorch's prefetch factor); the study's pick, if not a grid point, is re-measured beside the
grid's best all the same; so does ``stalls`` (object-store reads of 0.5 ms, one in forty
stalled 120 ms, batch 32, a 20 ms step: 0 to 32 workers at prefetch 2 and 4). ``--studies N``
runs N default studies of each workload against one grid, and ends with the median of their
side-by-side fractions; each row also gives the workers the grid needs (its fewest within 5%
of its best) against the pick's.

    .venv/bin/python benchmarks/sweep_cost.py [--workloads compute,cpu,io,object_store,stalls]
        [--repeats 3] [--studies 1] [--no-grid] [override ...]
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

from _common import GRIDS, SCENARIOS, compose_run_config, multirun

NEAR = 0.05  # a setting within this of the grid's best is "within noise" of it


def study_figures(out: Path) -> dict[str, Any]:
    """The default study's figures, read back from its Optuna and MLflow stores."""
    import optuna
    from mlflow import MlflowClient

    from hydra_plugins.loadertune_sweeper.plan._guess import study_range

    storage = f"sqlite:///{out}/optuna.db"
    (name,) = optuna.get_all_study_names(storage)
    study = optuna.load_study(study_name=name, storage=storage)
    ranged = study_range(study)  # the range the guess set, widened or narrowed
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
    with tempfile.TemporaryDirectory() as tmp:  # not into the output root it reads
        for r in own:
            if int(r.data.tags["optuna.trial_number"]) in window:
                path = client.download_artifacts(r.info.run_id, "trial_result.json", tmp)
                number = int(r.data.tags["optuna.trial_number"])
                measure_s[number] = json.loads(Path(path).read_text())["measure_s"]
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
        "searched_high": ranged.searched if ranged else 0,
    }


def _results(out: Path) -> dict[str, Any]:
    import yaml

    (path,) = out.glob("multirun/*/*/optimization_results.yaml")
    data = yaml.safe_load(path.read_text())
    return data if isinstance(data, dict) else {}


def grid(
    overrides: list[str],
    out: Path,
    repeats: int,
    high: int,
    chosen: tuple[list[int], list[int]] | None = None,
) -> tuple[dict[str, float], float]:
    """Every setting of the written space, its ``num_workers`` up to ``high`` at least (or
    the ``chosen`` workers and prefetch factors), ``repeats`` interleaved rounds: each
    setting's median time per sample (ms), keyed like Optuna params, and the grid's wall
    time (s)."""
    from loadertune.machine import cpus_per_rank

    counts, factors = chosen or (
        list(range(max(2 * cpus_per_rank(1), high) + 1)),
        [1, 2, 4, 8],
    )
    settings = [{"loader.num_workers": 0}] * (0 in counts) + [
        {"loader.num_workers": w, "loader.prefetch_factor": p}
        for w in counts
        if w > 0
        for p in factors
    ]
    start = time.perf_counter()
    times = side_by_side(settings, overrides, out, repeats, "grid")
    wall = time.perf_counter() - start
    return {k: statistics.median(v) for k, v in times.items()}, wall


def side_by_side(
    settings: list[dict[str, Any]], overrides: list[str], out: Path, repeats: int, what: str
) -> dict[str, list[float]]:
    """Each setting's time per sample (ms) in ``repeats`` interleaved rounds (A B C, B C A,
    ...), keyed like Optuna params; in this process, ``trial.steps`` timed steps each."""
    from loadertune import run_trial

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
        print(f"{what} round {round_ + 1}: {time.perf_counter() - start:.1f} s so far", flush=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-grid", action="store_true")
    parser.add_argument("--workloads", default="compute", help="of " + ",".join(SCENARIOS))
    parser.add_argument(
        "--remeasure", type=int, default=6, help="side-by-side rounds of pick and grid best"
    )
    parser.add_argument("--analyse", type=Path, help="a finished sweep's output root instead")
    parser.add_argument("--studies", type=int, default=1, help="default studies per workload")
    args, overrides = parser.parse_known_args()
    if args.analyse is not None:
        args.no_grid = True
        one_workload(args.analyse, float("nan"), overrides, args, {})
        return
    rows = []
    for name in args.workloads.split(","):
        these = [*SCENARIOS[name], *overrides]
        grid_of: dict[str, Any] = {"chosen": GRIDS.get(name)}  # measured once, for every study
        for study in range(args.studies):
            print(f"== workload {name}, study {study + 1} (load {_load()})", flush=True)
            out = Path(tempfile.mkdtemp(prefix=f"loadertune-bench-{name}-"))
            proc, wall = multirun(out, ["hydra.sweeper.study_name=bench", *these])
            if proc.returncode:
                raise SystemExit(proc.stderr[-4000:])
            rows.append({"workload": name, **one_workload(out, wall, these, args, grid_of)})
            print(f"   (load {_load()})", flush=True)
        _studies_summary(name, [r for r in rows if r["workload"] == name])
    if len(rows) > 1:
        keys = list(rows[0])
        print("| " + " | ".join(keys) + " |")
        print("|" + "---|" * len(keys))
        for row in rows:
            print("| " + " | ".join(str(row.get(k, "")) for k in keys) + " |")


def _short(params: dict[str, Any]) -> str:
    """``loader.num_workers=2 ...`` as ``num_workers=2 ...``, for the table."""
    return " ".join(f"{k.split('.')[-1]}={v}" for k, v in params.items())


def _fmt(values: list[float]) -> str:
    return ", ".join(f"{v:.3f}" for v in values)


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _studies_summary(name: str, rows: list[dict[str, Any]]) -> None:
    """The median over a workload's studies of the pick's side-by-side fraction."""
    key = "pick / grid best, re-measured"
    fractions = [1.0 if r.get(key) == "same setting" else r.get(key) for r in rows]
    known = [f for f in fractions if isinstance(f, float)]
    if len(rows) < 2 or not known:
        return
    picks = ", ".join(str(r["recommended"]) for r in rows)
    print(
        f"== {name}: {len(rows)} studies, pick / grid best side by side: median "
        f"{statistics.median(known):.3f} (each {_fmt(known)}); picks {picks}; the grid needs "
        f"{rows[0].get('grid needs')} workers",
        flush=True,
    )


def one_workload(
    out: Path,
    wall: float,
    overrides: list[str],
    args: argparse.Namespace,
    grid_of: dict[str, Any],
) -> dict[str, Any]:
    """Print one study's figures and, unless ``--no-grid``, its grid's (measured at the first
    study and kept in ``grid_of`` for the others); the table's row."""
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
    row: dict[str, Any] = {
        "study s": round(wall, 1),
        "settings measured": f["distinct"],
        "started twice": len(f["measured"]) - f["distinct"],
        "child runs": f["children"],
        "recommended": _short(rec.get("params") or {}),
        "confidence": rec.get("confidence"),
    }
    if args.no_grid:
        return row
    if "medians" not in grid_of:
        grid_of["medians"], grid_of["wall"] = grid(
            overrides, out / "grid", args.repeats, f["searched_high"], grid_of["chosen"]
        )
    medians, grid_wall = grid_of["medians"], grid_of["wall"]
    best_key = min(medians, key=lambda k: medians[k])
    needs = min(
        json.loads(k)["loader.num_workers"]
        for k, v in medians.items()
        if v <= (1 + NEAR) * medians[best_key]
    )
    picked = (rec.get("params") or {}).get("loader.num_workers")
    row["grid needs"] = needs
    row["pick workers / needed"] = round(picked / needs, 2) if picked and needs else picked
    print(
        f"grid: {len(medians)} settings x {args.repeats} interleaved rounds = "
        f"{len(medians) * args.repeats} measurements, {grid_wall:.1f} s; best {best_key} at "
        f"{medians[best_key]:.4f} ms/sample; study/grid wall = {wall / grid_wall:.2f}"
    )
    row |= {"grid settings": len(medians), "grid s": round(grid_wall, 1)}
    row["study / grid wall"] = round(wall / grid_wall, 2)
    row["grid best"] = _short(json.loads(best_key))
    params = {k: v for k, v in (rec.get("params") or {}).items() if k.startswith("loader.")}
    if params.get("loader.num_workers") == 0:
        params = {"loader.num_workers": 0}
    key = json.dumps({k: params[k] for k in sorted(params)}, sort_keys=True)
    print(
        "grid medians (ms/sample): "
        + ", ".join(f"{_short(json.loads(k))} {v:.3f}" for k, v in medians.items()),
        flush=True,
    )
    if key in medians:
        row["pick / grid best, grid medians"] = round(medians[best_key] / medians[key], 3)
        print(
            f"recommendation's throughput / grid's best: {row['pick / grid best, grid medians']}"
            f" (grid medians: {medians[key]:.4f} against {medians[best_key]:.4f} ms/sample)"
        )
    if key != best_key and args.remeasure:
        # The grid's medians of a few rounds carry the machine's scatter: the pick and the
        # grid's best measured again, side by side, decide the fraction.
        pair = [json.loads(key), json.loads(best_key)]
        again = side_by_side(pair, overrides, out / "grid", args.remeasure, "re-measure")
        # Round by round, as the verdict compares: each round's ratio cancels the machine's
        # speed in that round, which a ratio of the two medians would keep.
        ratios = [b / p for b, p in zip(again[best_key], again[key], strict=True)]
        fraction = statistics.median(ratios)
        row["pick / grid best, re-measured"] = round(fraction, 3)
        print(
            f"re-measured side by side, {args.remeasure} rounds: pick / grid best throughput "
            f"{fraction:.3f}, median of the rounds' ratios (pick faster in "
            f"{sum(r > 1 for r in ratios)} of {len(ratios)}; pick {_fmt(again[key])}; "
            f"grid best {_fmt(again[best_key])} ms)"
        )
    elif key == best_key:
        row["pick / grid best, re-measured"] = "same setting"
    near = [
        t.params
        for t in f["pruned"]
        if medians.get(json.dumps(t.params, sort_keys=True), float("inf"))
        <= (1 + NEAR) * medians[best_key]
    ]
    print(f"pruned settings within {NEAR:.0%} of the grid's best: {len(near)} {near}")
    row["pruned within 5% of best"] = len(near)
    return row


if __name__ == "__main__":
    main()
