"""Two ranks on one node: the per-rank num_workers grid measured with both ranks running, beside
what a one-process sweep and a two-rank sweep recommend.

Two workloads, each with a sleep standing in for the accelerator step (``model=simulated``):
a CPU-bound one (JPEG decode with Pillow in every worker) and a latency-bound one (shard rows
read from a slow device with 32 reads in flight). For each, every per-rank ``num_workers`` in
``--workers`` is measured as a 2-rank trial (gloo, ``DistributedSampler``, DDP-paced steps),
interleaved and repeated; the node's samples/s per setting is the median of the repeats. Then
``loadertune -m`` runs twice on the same workload: once as one process (the advice a user
gets today, applied to each rank) and once with ``trial.nproc_per_node=2``. Each
recommendation is scored by the grid's node throughput at that setting.

.venv/bin/python benchmarks/ranks.py [--repeats 3] [--trials 8] [--out /tmp/ranks-bench]
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path
from typing import Any

from _common import ROOT, compose_run_config, multirun

WORKLOADS = {
    "CPU-bound decode": [
        "dataset=synthetic_images",
        "dataset.count=1024",
        "loader.batch_size=16",
        "model=simulated",
        "model.step_ms=15",
    ],
    "latency-bound read": [
        "dataset=array_shards",
        "dataset.count=4096",
        "storage=throttled",
        "storage.latency_ms=4",
        "storage.bandwidth_mb_s=2000",
        "storage.queue_depth=32",
        "loader.batch_size=16",
        "model=simulated",
        "model.step_ms=10",
    ],
}
RANKS = 2


def grid(workload: list[str], workers: list[int], repeats: int) -> dict[int, dict[int, float]]:
    """Per-rank workers -> {repeat: node ms per sample}, both ranks running, interleaved."""
    from loadertune import run_trial

    times: dict[int, dict[int, float]] = {w: {} for w in workers}
    for r in range(repeats):
        for w in workers:
            config = compose_run_config(
                [*workload, f"trial.nproc_per_node={RANKS}", f"loader.num_workers={w}"]
            )
            result = run_trial(config)
            times[w][r] = result.summary.time_per_sample_ms
            print(f"  repeat {r} workers/rank={w}: {1000 / times[w][r]:,.0f} samples/s (node)")
    return times


def recommended_workers(out: Path, workload: list[str], nproc: int, trials: int) -> int:
    """``loadertune -m`` on the workload with ``nproc`` ranks: its recommended num_workers."""
    from omegaconf import OmegaConf

    out.mkdir(parents=True, exist_ok=True)
    args = [*workload, f"trial.nproc_per_node={nproc}", f"hydra.sweeper.n_trials={trials}"]
    proc, wall = multirun(out, args)
    if proc.returncode != 0:
        raise SystemExit(f"loadertune -m {' '.join(args)} failed:\n{proc.stderr[-2000:]}")
    (results,) = out.glob("multirun/*/*/optimization_results.yaml")
    data: Any = OmegaConf.to_container(OmegaConf.load(results))
    chosen = int(data["recommended"]["loader"]["num_workers"])
    print(f"  sweep with {nproc} rank(s): num_workers={chosen} per rank ({wall:.0f} s)")
    return chosen


def report(name: str, times: dict[int, dict[int, float]], single: int, ranked: int) -> None:
    """The grid and how each recommendation scores against its best."""
    from loadertune.decision import recommend

    rate = {w: 1000 / statistics.median(t.values()) for w, t in times.items()}
    best = max(rate, key=lambda w: rate[w])
    cheapest = recommend(times, cost={w: w for w in times}).chosen
    print(f"\n{name}: node samples/s by per-rank num_workers (median of repeats)")
    for w, v in rate.items():
        marks = [m for m, k in (("best", best), ("cheapest within noise", cheapest)) if k == w]
        print(f"  {w}: {v:8,.0f}  {', '.join(marks)}")
    for label, w in (("one-process recommendation", single), ("2-rank recommendation", ranked)):
        share = rate[w] / rate[best] if w in rate else float("nan")
        print(f"  {label}: {w} per rank ({RANKS * w} on the node) -> {share:.1%} of the best")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trials", type=int, default=8, help="hydra.sweeper.n_trials per sweep")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "bench-ranks")
    parser.add_argument("--only", choices=sorted(WORKLOADS), default=None)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    for name, workload in WORKLOADS.items():
        if args.only and name != args.only:
            continue
        print(f"{name}:")
        slug = name.split()[0].lower()
        single = recommended_workers(args.out / f"{slug}-1", workload, 1, args.trials)
        ranked = recommended_workers(args.out / f"{slug}-{RANKS}", workload, RANKS, args.trials)
        workers = sorted({*args.workers, single, ranked})  # the grid scores both picks
        times = grid(workload, workers, args.repeats)
        report(name, times, single, ranked)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
