"""pin_memory on and off on a CUDA GPU, with real models: time per sample and the copy itself.

Two workloads: ResNet-18 on 224 px crops of ImageNet-like JPEGs (float32 batches, 19 MB at
batch 32), and the tokens_gpu preset (int64 token batches, small). Each is run with
pin_memory (and non-blocking copies) on and off, alternating, ``--repeats`` times; medians of
time per sample, host-to-device copy time per step (CUDA events), copy speed and GPU use.
Needs a CUDA device; prints why and exits 2 without one.

.venv/bin/python benchmarks/pin_memory_cuda.py [--repeats 5] [--workers 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys

from _common import compose_run_config

WORKLOADS = {
    "resnet18, 224 px JPEG": [
        "dataset.image_size=256",
        "dataset.crop_size=224",
        "model=resnet18",
        "trial.steps=30",
    ],
    "tokens_gpu transformer": ["experiment=tokens_gpu", "trial.steps=30"],
}
FIGURES = ("time_per_sample_ms", "copy_ms_mean", "h2d_mb_per_s", "gpu_utilization_percent")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    import torch

    from loadertune import run_trial

    if not torch.cuda.is_available():
        print("no CUDA device here: nothing to measure", file=sys.stderr)
        sys.exit(2)
    print(f"GPU: {torch.cuda.get_device_name(0)}; workers={args.workers}; medians")
    table: dict[tuple[str, bool], dict[str, list[float]]] = {}
    for name, overrides in WORKLOADS.items():
        run_trial(compose_run_config([*overrides, "trial.device=cuda"]))  # data, CUDA warm-up
        for _ in range(args.repeats):
            for pin in (True, False):
                config = compose_run_config(
                    [
                        *overrides,
                        "trial.device=cuda",
                        f"loader.num_workers={args.workers}",
                        f"loader.pin_memory={str(pin).lower()}",
                    ]
                )
                metrics = run_trial(config).metrics()
                row = table.setdefault((name, pin), {})
                for key in FIGURES:
                    row.setdefault(key, []).append(metrics.get(key, float("nan")))
    print(f"{'workload':26} {'pin':>5} " + " ".join(f"{k:>24}" for k in FIGURES))
    for (name, pin), row in table.items():
        cells = " ".join(f"{statistics.median(row[k]):>24.3f}" for k in FIGURES)
        print(f"{name:26} {pin!s:>5} {cells}")


if __name__ == "__main__":
    main()
