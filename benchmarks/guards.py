"""How fast the sweep's guards act: leaking trials against their memory budget (how far past
it the tree got, per leak size), and a hung trial against its stall limit. Uses the
fault-injection dataset of the tests.

    .venv/bin/python benchmarks/guards.py [--budget 800] [--sizes 8 32 64] [--repeats 5]
                                          [--stall 10] [--hangs 0] [--single]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def sweep(out: Path, trials: list[dict[str, Any]], args: argparse.Namespace) -> list[Any]:
    """One sweep over ``trials`` (enqueued in order); its finished Optuna trials."""
    import optuna

    storage = f"sqlite:///{out}/optuna.db"
    study = optuna.create_study(storage=storage, study_name="g")
    for params in trials:
        study.enqueue_trial(params)
    sizes = ",".join(str(s) for s in sorted({t["+dataset.leak_mb"] for t in trials}))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests" / "fixtures_pkg")}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.run(
        [
            str(Path(sys.executable).with_name("loadertune")),
            "-m",
            f"paths.output_root={out}",
            "dataset=custom",
            "dataset._target_=faulty_data.Faulty",
            f"+dataset.leak_mb=choice({sizes})",
            "+dataset.mode=choice(hang,leak)",
            "loader.num_workers=2",
            "loader.batch_size=4",
            "model=simulated",
            "model.step_ms=1",
            "trial.steps=100",
            "hydra.sweeper.study_name=g",
            f"hydra.sweeper.n_trials={len(trials)}",
            "hydra.sweeper.max_failure_rate=1.0",
            "hydra.sweeper.verdict_repeats=0",
            "hydra.sweeper.pruner=none",
            f"hydra.sweeper.stall_timeout_s={args.stall}",
            f"hydra.sweeper.memory_budget_mb={args.budget}",
            "tracking.enabled=false",
            "hydra.sweeper.host_lock=off",  # nothing here is timed: no queue behind others
        ],
        capture_output=True,
        text=True,
        cwd=out,
        env=env,
    )
    if proc.returncode not in (0, 3):  # 3: nothing to recommend, as every trial failed
        sys.exit(proc.stderr)
    return list(optuna.load_study(study_name="g", storage=storage).trials)


def single(size: int, args: argparse.Namespace) -> float | None:
    """One leaking trial without a sweep (its own guard); the MB it reached, None if not stopped."""
    out = Path(tempfile.mkdtemp(prefix="loadertune-guards-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests" / "fixtures_pkg")}
    proc = subprocess.run(
        [
            str(Path(sys.executable).with_name("loadertune")),
            f"paths.output_root={out}",
            "dataset=custom",
            "dataset._target_=faulty_data.Faulty",
            "+dataset.mode=leak",
            f"+dataset.leak_mb={size}",
            "loader.num_workers=2",
            "loader.batch_size=4",
            "model=simulated",
            "model.step_ms=1",
            "trial.steps=400",
            f"trial.memory_budget_mb={args.budget}",
            "trial.host_lock=off",
            "tracking.enabled=false",
        ],
        capture_output=True,
        text=True,
        cwd=out,
        env=env,
    )
    found = re.search(r"reached (\d+) MB", proc.stderr)
    return float(found.group(1)) if proc.returncode == 3 and found else None


def table(title: str, peaks: dict[int, list[float]], args: argparse.Namespace) -> None:
    """Peak over budget per leak size, as a markdown table."""
    print(f"{title}, budget {args.budget:.0f} MB: the guard's last reading / budget")
    print("| leak per item | trials stopped | median | max | readings (MB) |")
    print("|---|---|---|---|---|")
    for size, seen in peaks.items():
        ratios = [p / args.budget for p in seen] or [float("nan")]
        print(
            f"| {size} MB | {len(seen)}/{args.repeats} | {statistics.median(ratios):.0%} | "
            f"{max(ratios):.0%} | {', '.join(f'{p:.0f}' for p in seen)} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=800.0)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--stall", type=float, default=10.0)
    parser.add_argument("--hangs", type=int, default=0, help="hung trials to time too")
    parser.add_argument("--single", action="store_true", help="single trials' guard too")
    args = parser.parse_args()

    peaks: dict[int, list[float]] = {size: [] for size in args.sizes}
    hang: list[float] = []
    for _ in range(args.repeats):  # one sweep a repeat: a study ends once its space is measured
        out = Path(tempfile.mkdtemp(prefix="loadertune-guards-"))
        trials = [{"+dataset.mode": "leak", "+dataset.leak_mb": s} for s in args.sizes]
        for t in sweep(out, trials, args):
            if t.user_attrs.get("reason") == "memory_budget":
                peaks[t.params["+dataset.leak_mb"]].append(t.user_attrs["peak_memory_mb"])
    if args.hangs:
        out = Path(tempfile.mkdtemp(prefix="loadertune-guards-"))
        size = args.sizes[0]
        trials = [{"+dataset.mode": "hang", "+dataset.leak_mb": size}] * args.hangs
        hang = [t.user_attrs["wall_s"] for t in sweep(out, trials, args)]

    table("leaking sweep trials", peaks, args)
    if args.single:
        alone = {
            size: [p for _ in range(args.repeats) if (p := single(size, args))]
            for size in args.sizes
        }
        table("leaking single trials (loadertune without -m)", alone, args)
    if hang:
        print(
            f"hung trial, stall limit {args.stall:.0f} s: killed and cleaned up after "
            f"{[round(w, 2) for w in hang]} s (median {statistics.median(hang):.2f} s, "
            "from trial start, which includes set-up before the hang)"
        )


if __name__ == "__main__":
    main()
