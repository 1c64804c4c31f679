"""The ImageNet-like presets against num_workers: where more workers stop helping, and why.

Each preset (``experiment=imagenet_like_hdd`` / ``imagenet_like_nfs``) is measured at 0, 1,
2, 4 and 8 workers, interleaved and repeated; medians of samples/s, of the share of the
simulated device's read slots in use, and of the CPU the process tree used (of one core).
The hdd preset's ceiling is one read at a time: 1 / (10 ms + 37 KB / 160 MB/s) = 98 files/s.

.venv/bin/python benchmarks/presets_workers.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics

from _common import compose_run_config

PRESETS = ("imagenet_like_hdd", "imagenet_like_nfs")
WORKERS = (0, 1, 2, 4, 8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from loadertune import run_trial

    rows: dict[tuple[str, int], dict[str, list[float]]] = {}
    for _ in range(args.repeats):
        for preset in PRESETS:
            for workers in WORKERS:
                warmup = max(5, 2 * workers)  # drain the start-up burst of batches
                config = compose_run_config(
                    [
                        f"experiment={preset}",
                        f"loader.num_workers={workers}",
                        f"trial.warmup_steps={warmup}",
                        "trial.steps=20",
                    ]
                )
                result = run_trial(config)
                row = rows.setdefault((preset, workers), {})
                row.setdefault("samples/s", []).append(result.summary.samples_per_s)
                row.setdefault("slots", []).append(result.storage["storage_busy_fraction"])
                row.setdefault("cpu", []).append(result.cpu_percent_mean)
    print(f"{'preset':18} {'workers':>7} {'samples/s':>10} {'device slots busy':>18} {'CPU %':>6}")
    for (preset, workers), row in rows.items():
        med = {k: statistics.median(v) for k, v in row.items()}
        print(
            f"{preset:18} {workers:>7} {med['samples/s']:>10.0f} {med['slots']:>18.2f} "
            f"{med['cpu']:>6.0f}  {[round(v) for v in row['samples/s']]}"
        )


if __name__ == "__main__":
    main()
