"""The loader throughput ceiling each storage imposes, measured through real DataLoaders.

A decode-light, I/O-heavy workload (array_shards of 4 MB samples, a step that takes no time)
so that the storage, not the CPU, sets the pace; 1 and 8 workers; each storage's delivered
MB/s (samples/s x sample bytes) beside what it is meant to model: for hdd and nfs the device
model's figure for 4 MB reads, for local/cold/memory a plain single-process read of the
same files (warm, evicted, in /dev/shm). Configurations are interleaved and repeated; medians.

.venv/bin/python benchmarks/storage_ceiling.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from _common import compose_run_config
from throttle_ceiling import predicted_mb_s

SAMPLE_BYTES = 4 * 1024 * 1024
WORKLOAD = [
    "dataset=array_shards",
    "dataset.count=320",  # 1.3 GB: more than a trial reads, so no sample is read twice
    "dataset.sample_shape=[4,1024,1024]",
    "dataset.shard_size=16",
    "model=simulated",
    "model.step_ms=0",
    "loader.batch_size=4",
    # Warm-up drains the burst of batches all workers finish at once at start-up (8 workers x
    # prefetch 2), so the timed window sees the steady rate, not a queue filled beforehand.
    "trial.warmup_steps=20",
    "trial.steps=30",
]
STORAGES = ["local", "cold", "memory", "hdd", "nfs"]
PRESETS = {"hdd": (10.0, 160.0, 1), "nfs": (1.0, 110.0, 16)}


def plain_read_mb_s(files: list[Path], cold: bool, ram: bool) -> float:
    """One process reading ``files`` whole: warm cache, evicted first, or copied to /dev/shm."""
    from loadertune.storage._page_cache import evict

    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
        if ram:
            files = [Path(shutil.copy(f, tmp)) for f in files]
        if cold:
            evict(files)
        start = time.perf_counter()
        total = sum(len(f.read_bytes()) for f in files)
        return total / 1e6 / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from loadertune import run_trial
    from loadertune.datasets import build_dataset

    base = compose_run_config(WORKLOAD)
    files = sorted(build_dataset(base).root.glob("shard_*.npy"))
    rates: dict[tuple[str, int], list[float]] = {}
    first: dict[tuple[str, int], list[float]] = {}
    refs: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for storage in STORAGES:
            for workers in (1, 8):
                config = compose_run_config(
                    [*WORKLOAD, f"storage={storage}", f"loader.num_workers={workers}"]
                )
                result = run_trial(config)
                mb_s = result.summary.samples_per_s * SAMPLE_BYTES / 1e6
                rates.setdefault((storage, workers), []).append(mb_s)
                first.setdefault((storage, workers), []).append(result.first_batch_s)
        for name, cold, ram in (
            ("local", False, False),
            ("cold", True, False),
            ("memory", False, True),
        ):
            refs.setdefault(name, []).append(plain_read_mb_s(files, cold, ram))
    print(
        f"{'storage':8} {'workers':>7} {'MB/s median':>12} {'meant to model':>15} "
        f"{'ratio':>6} {'first batch s':>14}  all MB/s"
    )
    for (storage, workers), values in rates.items():
        med = statistics.median(values)
        if storage in PRESETS:
            model = predicted_mb_s(*PRESETS[storage], procs=workers, size=SAMPLE_BYTES)
            label = f"{model:.1f} (model)"
        else:
            model = statistics.median(refs[storage])
            label = f"{model:.0f} (plain read)"
        print(
            f"{storage:8} {workers:>7} {med:>12.1f} {label:>15} {med / model:>6.2f} "
            f"{statistics.median(first[(storage, workers)]):>14.3f}  {[round(v) for v in values]}"
        )


if __name__ == "__main__":
    main()
