"""Search efficiency: the default study against an exhaustive grid, on scenarios with
different bottlenecks. For each scenario it runs the grid (every num_workers x
prefetch_factor point once) and then the default study (TPE, baselines, model-based guess,
verdict) with a third of the grid's trials, and reports:

- trials and wall time the study needed to first reach within 5% of the grid's best;
- the recommendation's throughput against the grid's best (target: >= 95%);
- the recommended num_workers against the smallest grid setting within 5% of the best;
- the model-based guess against the grid's best setting.

    .venv/bin/python benchmarks/search_efficiency.py [--scenarios compute,cpu,io] [--max-workers 8]
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SCENARIOS: dict[str, list[str]] = {
    # The model step (60 ms) outlasts loading a batch: one worker hides loading.
    "compute": ["model=simulated", "model.step_ms=60"],
    # Decoding large JPEGs keeps the CPUs busy: more workers than CPUs cannot help.
    "cpu": [
        "model=simulated",
        "model.step_ms=5",
        "dataset.image_size=256",
        "dataset.crop_size=224",
        "dataset.quality=95",
        "dataset.count=1024",
    ],
    # Every read waits 15 ms on a latency-bound device: workers overlap the waits.
    "io": [
        "model=simulated",
        "model.step_ms=5",
        "storage=throttled",
        "storage.latency_ms=15",
        "storage.bandwidth_mb_s=2000",
    ],
}
COMMON = [
    "trial.steps=24",
    "trial.warmup_steps=3",
    "loader.batch_size=32",
    "tracking.enabled=false",
]


def run(out: Path, name: str, args: list[str]) -> float:
    script = str(Path(sys.executable).with_name("loadertune"))
    start = time.perf_counter()
    proc = subprocess.run(
        [script, "-m", f"paths.output_root={out}", f"hydra.sweeper.study_name={name}", *args],
        capture_output=True,
        text=True,
        cwd=out,
    )
    if proc.returncode:
        sys.exit(f"{name} failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - start


def trials(out: Path, name: str) -> list[Any]:
    import optuna

    return optuna.load_study(study_name=name, storage=f"sqlite:///{out}/optuna.db").trials


def workers(t: Any) -> int:
    return int(t.params.get("loader.num_workers", 0))


def scenario(key: str, max_workers: int) -> dict[str, Any]:
    from omegaconf import OmegaConf

    out = Path(tempfile.mkdtemp(prefix=f"loadertune-search-{key}-"))
    space = [
        f"loader.num_workers=range(0,{max_workers + 1})",
        "loader.prefetch_factor=choice(1,2,4,8)",
    ]
    base = [*SCENARIOS[key], *COMMON]
    grid_wall = run(
        out,
        "grid",
        [
            *base,
            *space,
            "hydra.sweeper.sampler=grid",
            "hydra.sweeper.n_trials=1000",
            "hydra.sweeper.verdict_repeats=0",
        ],
    )
    grid = [t for t in trials(out, "grid") if t.value is not None]
    measured = [t for t in grid if t.user_attrs.get("repeat_of") is None]
    best = min(t.value for t in grid)
    within = [t for t in measured if t.value <= best * 1.05]
    budget = math.ceil(len(measured) / 3)
    study_wall = run(out, "study", [*base, *space, f"hydra.sweeper.n_trials={budget}"])
    study = trials(out, "study")
    reached = next((i + 1 for i, t in enumerate(study) if t.value and t.value <= best * 1.05), None)
    starts = [t.datetime_start for t in study]
    reached_s = (
        (study[reached - 1].datetime_complete - starts[0]).total_seconds() if reached else None
    )
    (sweep_dir,) = (out / "multirun").glob("*/*/best_loader.yaml")
    rec = OmegaConf.load(sweep_dir)
    rec_value = min(
        t.value
        for t in grid
        if workers(t) == rec.num_workers
        and (
            rec.num_workers == 0
            or t.params.get("loader.prefetch_factor") == (rec.prefetch_factor or 2)
        )
    )
    import optuna

    guess = optuna.load_study(
        study_name="study", storage=f"sqlite:///{out}/optuna.db"
    ).user_attrs.get("guess", {})
    return {
        "scenario": key,
        "grid points measured": len(measured),
        "grid wall s": round(grid_wall),
        "grid best ms/sample": round(best, 4),
        "grid best num_workers": workers(min(grid, key=lambda t: t.value)),
        "smallest num_workers within 5%": min(workers(t) for t in within),
        "study trials": len(study),
        "study wall s (incl. verdict)": round(study_wall),
        "trials to within 5%": reached,
        "seconds to within 5%": None if reached_s is None else round(reached_s),
        "recommended num_workers": rec.num_workers,
        "recommended / grid best throughput": round(best / rec_value, 3),
        "model guess num_workers": guess.get("workers"),
        "outputs": str(out),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="compute,cpu,io")
    parser.add_argument("--max-workers", type=int, default=8)
    args = parser.parse_args()
    rows = [scenario(key, args.max_workers) for key in args.scenarios.split(",")]
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in keys) + " |")


if __name__ == "__main__":
    main()
