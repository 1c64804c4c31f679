"""How fast the sweep's guards act: a hung trial against its stall limit, a leaking trial
against its memory budget. Uses the fault-injection dataset of the tests.

    .venv/bin/python benchmarks/guards.py [--stall 10] [--budget 1500] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stall", type=float, default=10.0)
    parser.add_argument("--budget", type=float, default=1500.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import optuna

    out = Path(tempfile.mkdtemp(prefix="loadertune-guards-"))
    storage = f"sqlite:///{out}/optuna.db"
    study = optuna.create_study(storage=storage, study_name="g")
    modes = ["hang", "leak"] * args.repeats
    for mode in modes:
        study.enqueue_trial({"+dataset.mode": mode})
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests" / "fixtures_pkg")}
    proc = subprocess.run(
        [
            str(Path(sys.executable).with_name("loadertune")),
            "-m",
            f"paths.output_root={out}",
            "dataset=custom",
            "dataset._target_=faulty_data.Faulty",
            "+dataset.leak_mb=100",
            "+dataset.mode=choice(hang,leak)",
            "loader.num_workers=2",
            "loader.batch_size=4",
            "model=simulated",
            "model.step_ms=1",
            "trial.steps=100",
            "hydra.sweeper.study_name=g",
            f"hydra.sweeper.n_trials={len(modes)}",
            "hydra.sweeper.max_failure_rate=1.0",
            "hydra.sweeper.pruner=none",
            f"hydra.sweeper.stall_timeout_s={args.stall}",
            f"hydra.sweeper.memory_budget_mb={args.budget}",
            "tracking.enabled=false",
        ],
        capture_output=True,
        text=True,
        cwd=out,
        env=env,
    )
    if proc.returncode:
        sys.exit(proc.stderr)
    trials = optuna.load_study(study_name="g", storage=storage).trials
    hang = [t.user_attrs["wall_s"] for t in trials if t.user_attrs.get("reason") == "timeout"]
    peaks = [
        t.user_attrs["peak_memory_mb"]
        for t in trials
        if t.user_attrs.get("reason") == "memory_budget"
    ]
    print(
        f"hung trial, stall limit {args.stall:.0f} s: killed and cleaned up after "
        f"{[round(w, 2) for w in hang]} s (median {statistics.median(hang):.2f} s, "
        "from trial start, which includes set-up before the hang)"
    )
    print(
        f"leaking trial (+100 MB per item), budget {args.budget:.0f} MB: stopped at "
        f"{peaks} MB PSS (median {statistics.median(peaks) / args.budget:.0%} of the budget)"
    )


if __name__ == "__main__":
    main()
