"""Adding workers on a slow device: it keeps helping while latency dominates, and stops once
the shared bandwidth is saturated.

One throttled device (5 ms per read, 50 MB/s shared, 32 reads in flight), two sample sizes:
16 KB samples (a read is 5.3 ms, nearly all latency) and 1 MB samples (a read is 25 ms, 80%
transfer). A step that takes no time, so the loader's delivery rate is the figure. Worker
counts are interleaved and repeated; medians of delivered MB/s, of the share of the device's
read slots in use ("slots") and of the share of time its channel transferred ("bandwidth").

.venv/bin/python benchmarks/workers_scaling.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics

from _common import compose_run_config
from throttle_ceiling import predicted_mb_s

DEVICE = [
    "storage=throttled",
    "storage.latency_ms=5",
    "storage.bandwidth_mb_s=50",
    "storage.queue_depth=32",
]
CASES = {
    "16 KB samples (latency-bound)": (
        16_384,
        ["dataset.sample_shape=[16384]", "dataset.count=16384", "loader.batch_size=32"],
    ),
    "1 MB samples (bandwidth-bound)": (
        1_048_576,
        ["dataset.sample_shape=[1048576]", "dataset.count=1024", "loader.batch_size=4"],
    ),
}
COMMON = [
    "dataset=array_shards",
    "dataset.shard_size=256",
    "model=simulated",
    "model.step_ms=0",
    "trial.steps=20",
]
WORKERS = (1, 2, 4, 8, 16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from loadertune import run_trial

    rates: dict[tuple[str, int], list[float]] = {}
    slots: dict[tuple[str, int], list[float]] = {}
    band: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.repeats):
        for case, (size, overrides) in CASES.items():
            for workers in WORKERS:
                # Workers started together finish their batches together: the loader delivers
                # in bursts of up to workers x prefetch_factor batches. Warm-up drains the first
                # burst and the timed window spans many, so bursts do not inflate the rate.
                length = [
                    f"trial.warmup_steps={2 * workers}",
                    f"trial.steps={max(40, 10 * workers)}",
                ]
                config = compose_run_config(
                    [*COMMON, *DEVICE, *overrides, f"loader.num_workers={workers}", *length]
                )
                result = run_trial(config)
                rates.setdefault((case, workers), []).append(
                    result.summary.samples_per_s * size / 1e6
                )
                slots.setdefault((case, workers), []).append(
                    result.storage["storage_busy_fraction"]
                )
                band.setdefault((case, workers), []).append(
                    result.storage["storage_bandwidth_fraction"]
                )
    print(
        f"{'case':32} {'workers':>7} {'MB/s median':>12} {'model MB/s':>11} {'slots':>5} "
        f"{'bandwidth':>9}  all MB/s"
    )
    for (case, workers), values in rates.items():
        model = predicted_mb_s(5.0, 50.0, 32, workers, CASES[case][0])
        print(
            f"{case:32} {workers:>7} {statistics.median(values):>12.1f} {model:>11.1f} "
            f"{statistics.median(slots[(case, workers)]):>5.2f} "
            f"{statistics.median(band[(case, workers)]):>9.2f}  {[round(v, 1) for v in values]}"
        )


if __name__ == "__main__":
    main()
