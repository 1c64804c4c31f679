"""What each dataset and model costs on this machine, at the shipped defaults.

Datasets: bytes per sample as stored, and samples/s loaded in the training process
(``num_workers=0``, a step that takes no time), i.e. the CPU cost of one sample. Models: the
training step's time on the default dataset it pairs with, at the default batch of 32, on
this machine's device. Configurations are interleaved and repeated; medians.

.venv/bin/python benchmarks/workload_figures.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from _common import compose_run_config

DATASETS = {
    "synthetic_images": [],
    "imagenet_like (preset's images)": [
        "dataset.image_size=375",
        "dataset.size_jitter=0.25",
        "dataset.crop_size=224",
    ],
    "array_shards": ["dataset=array_shards"],
    "tokens": ["dataset=tokens"],
}
MODELS = {
    "mlp": ["model=mlp"],
    "small_cnn": ["model=small_cnn"],
    "resnet18 (112 px)": ["model=resnet18"],
    "transformer (tokens)": ["dataset=tokens", "model=transformer"],
}
LOADING = ["model=simulated", "model.step_ms=0", "trial.steps=20"]


def stored_bytes_per_sample(config: object) -> float:
    """Bytes on disk per sample of the dataset ``config`` names (generated if need be)."""
    from loadertune.datasets import build_dataset

    dataset = build_dataset(config)  # type: ignore[arg-type]
    root = Path(getattr(dataset, "root", "") or Path(dataset.path).parent)
    files = [p for p in root.rglob("*") if p.is_file() and p.name != "COMPLETE"]
    return sum(p.stat().st_size for p in files) / len(dataset)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from loadertune import run_trial

    sizes = {name: stored_bytes_per_sample(compose_run_config(o)) for name, o in DATASETS.items()}
    loading: dict[str, list[float]] = {}
    steps: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for name, overrides in DATASETS.items():
            result = run_trial(compose_run_config([*overrides, *LOADING]))
            loading.setdefault(name, []).append(result.summary.samples_per_s)
        for name, overrides in MODELS.items():
            short = ["trial.warmup_steps=2", "trial.steps=5"]
            result = run_trial(compose_run_config([*overrides, *short]))
            steps.setdefault(name, []).append(result.summary.compute_ms_mean)
            device = result.device
    print(f"{'dataset':34} {'KB/sample stored':>16} {'samples/s, 0 workers':>21}")
    for name, values in loading.items():
        print(f"{name:34} {sizes[name] / 1024:>16.1f} {statistics.median(values):>21.0f}")
    print(f"{'model':34} {'step ms (batch 32, ' + device + ')':>26}  all")
    for name, values in steps.items():
        print(f"{name:34} {statistics.median(values):>26.1f}  {[round(v) for v in values]}")


if __name__ == "__main__":
    main()
