"""Tar shards on a slow device with a CPU-heavy decode: the sweep's pick against a grid.

1. The grid: ``dataset=webdataset`` (``--shards`` tar shards of 96 px JPEGs, each decoded to
   a uint8 tensor) on ``storage=throttled`` (``--latency-ms`` a read, 40 MB/s), a 15 ms
   simulated step, measured at every ``num_workers`` from 0 to the shard count, interleaved,
   ``--repeats`` times (medians). Settings beyond the shard count are refused before they
   start, so the grid stops there; what they would cost is part 3.
2. The sweep: ``loadertune -m`` on the same workload searching ``num_workers`` in 0..2 x
   the shards (the range is capped at the shards) with a verdict; its recommendation is
   read from ``best_loader.yaml`` and its grid figure set against the grid's best.
3. Fewer shards than the range: a user's own iterable with 2 shards that does not declare
   them, at 4 workers: the workers that got no shard are recorded as ``idle_workers``.

.venv/bin/python benchmarks/streaming.py [--repeats 2] [--shards 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import yaml
from _common import ROOT, compose_run_config, multirun

FIXTURES = ROOT / "tests" / "fixtures_pkg"


def workload(shards: int, latency_ms: float) -> list[str]:
    """The overrides of the measured workload."""
    return [
        "dataset=webdataset",
        "dataset.count=1536",
        f"dataset.shards={shards}",
        "dataset.image_size=96",
        "storage=throttled",
        f"storage.latency_ms={latency_ms}",
        "storage.bandwidth_mb_s=40",
        "storage.queue_depth=4",
        "model=simulated",
        "model.step_ms=15",
        "loader.batch_size=32",
        "trial.steps=24",
    ]


def grid(base: list[str], shards: int, repeats: int) -> dict[int, list[float]]:
    """samples/s of every num_workers from 0 to ``shards``, interleaved, ``repeats`` times."""
    from loadertune import run_trial

    rates: dict[int, list[float]] = {}
    for _ in range(repeats):
        for workers in range(shards + 1):
            config = compose_run_config([*base, f"loader.num_workers={workers}"])
            result = run_trial(config)
            rates.setdefault(workers, []).append(result.summary.samples_per_s)
            print(
                f"  grid workers={workers}: {result.summary.samples_per_s:.0f} samples/s, "
                f"first batch {result.first_batch_s:.2f} s, "
                f"passes opened in the window {result.streaming['window_reopens']:.0f}",
                flush=True,
            )
    return rates


def sweep(base: list[str], shards: int) -> tuple[int, str]:
    """The verdict's num_workers, and the line that says where the range was capped."""
    out = Path(tempfile.mkdtemp(prefix="loadertune-streaming-"))
    args = [
        *base,
        f"hydra.sweeper.params.loader.num_workers=int(interval(0,{2 * shards}))",
        "hydra.sweeper.n_trials=8",
        "hydra.sweeper.verdict_repeats=2",
        "hydra.sweeper.study_name=streaming",
    ]
    proc, _ = multirun(out, args)
    if proc.returncode != 0:
        sys.exit(proc.stderr[-3000:])
    (best,) = out.glob("multirun/*/*/best_loader.yaml")
    capped = next((line for line in proc.stdout.splitlines() if "searched up to" in line), "")
    return int(yaml.safe_load(best.read_text())["num_workers"]), capped.strip()


def idle_workers() -> list[int]:
    """The idle workers of 4 workers over 2 undeclared shards."""
    from loadertune import run_trial

    sys.path.insert(0, str(FIXTURES))
    config = compose_run_config(
        [
            "dataset=custom",
            "dataset._target_=stream_data.ShardedVectors",
            "+dataset.n_shards=2",
            "+dataset.per_shard=256",
            "+dataset.declare=false",
            "model=mlp",
            "loader.num_workers=4",
            "trial.steps=10",
        ]
    )
    return run_trial(config).idle_workers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])
    base = workload(args.shards, args.latency_ms)
    rates = grid(base, args.shards, args.repeats)
    medians = {w: statistics.median(v) for w, v in rates.items()}
    best = max(medians, key=lambda w: medians[w])
    picked, capped = sweep(base, args.shards)
    print(f"{'num_workers':>11} {'samples/s (median)':>19}  repeats")
    for workers, rate in medians.items():
        marks = " <- grid best" * (workers == best) + " <- recommended" * (workers == picked)
        print(f"{workers:>11} {rate:>19.0f}  {[round(v) for v in rates[workers]]}{marks}")
    print(capped)
    print(
        f"recommended num_workers={picked}: {medians[picked] / medians[best]:.1%} of the grid's "
        f"best (num_workers={best}); never more workers than the {args.shards} shards"
    )
    print(f"4 workers over 2 undeclared shards: idle workers {idle_workers()}")


if __name__ == "__main__":
    main()
