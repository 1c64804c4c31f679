"""``cold`` against ``local``: time to first batch and steady throughput, same data, same loader.

Two workloads that read from storage and take no step time, so the loader is measured: the
default synthetic JPEGs (decode-heavy) and array_shards rows (I/O-heavy, random reads within
memory-mapped shards). Before every trial each file is read, so the page cache holds the
dataset: ``local`` trials read it from there, ``cold`` trials evict it first. Trials
alternate local, cold, local, cold...; medians.

.venv/bin/python benchmarks/cold_vs_local.py [--repeats 5] [--workers 2]
"""

from __future__ import annotations

import argparse
import statistics

from _common import compose_run_config

WORKLOADS = {
    "synthetic_images (JPEG)": [],
    "array_shards (12 KB rows)": ["dataset=array_shards", "dataset.count=16384"],
}
STEP = ["model=simulated", "model.step_ms=0"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    from loadertune import run_trial
    from loadertune.datasets import build_dataset
    from loadertune.storage._page_cache import files_under

    loader = [f"loader.num_workers={args.workers}"]
    first: dict[tuple[str, str], list[float]] = {}
    rate: dict[tuple[str, str], list[float]] = {}
    cached: dict[tuple[str, str], list[float]] = {}
    for name, overrides in WORKLOADS.items():
        base = compose_run_config([*overrides, *STEP])
        run_trial(base)  # generate once
        files = list(files_under([build_dataset(base).root]))
        for _ in range(args.repeats):
            for storage in ("local", "cold"):
                config = compose_run_config([*overrides, *STEP, *loader, f"storage={storage}"])
                for path in files:  # into the page cache (cold evicts it again)
                    path.read_bytes()
                result = run_trial(config)
                first.setdefault((name, storage), []).append(result.first_batch_s)
                rate.setdefault((name, storage), []).append(result.summary.samples_per_s)
                cached.setdefault((name, storage), []).append(
                    result.storage.get("storage_cached_fraction", float("nan"))
                )
    print(f"workers={args.workers}, {args.repeats} trials each, medians")
    print(f"{'workload':28} {'storage':7} {'first batch s':>13} {'samples/s':>10} {'cached':>7}")
    for (name, storage), values in first.items():
        print(
            f"{name:28} {storage:7} {statistics.median(values):>13.3f} "
            f"{statistics.median(rate[(name, storage)]):>10.0f} "
            f"{statistics.median(cached[(name, storage)]):>7.2f}"
        )
    for name in WORKLOADS:
        f = statistics.median(first[(name, "cold")]) / statistics.median(first[(name, "local")])
        r = statistics.median(rate[(name, "cold")]) / statistics.median(rate[(name, "local")])
        print(f"{name}: cold/local first batch x{f:.2f}, throughput x{r:.2f}")


if __name__ == "__main__":
    main()
