"""Instrumentation overhead: loadertune's time per sample against a bare loop, interleaved.

The bare loop does the same work (same dataset, loader, copy and model step) with nothing but
two clock reads around the timed window: no per-step marks, no callback, no process-tree
sampling. Rounds alternate A B A B so drift on a shared machine hits both alike; the figure
is the ratio of the medians.

    .venv/bin/python benchmarks/overhead.py [--rounds 7] [override ...]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from _common import compose_run_config


def bare_loop(config: Any) -> float:
    """Time per sample (ms) of ``for batch in loader`` doing the trial's work."""
    import torch

    from loadertune.datasets import build_dataset
    from loadertune.loader import build_dataloader, effective_settings
    from loadertune.models import build_train_step, split_batch
    from loadertune.trial import resolve_device

    torch.manual_seed(config.trial.seed)
    device = torch.device(resolve_device(config.trial.device))
    dataset = build_dataset(config)
    step = build_train_step(config.model, dataset[0], dataset.num_classes, device, "x")
    eff = effective_settings(config.loader, device)
    loader = build_dataloader(dataset, eff, device, generator=torch.Generator().manual_seed(0))
    untimed = 1 + config.trial.warmup_steps
    total = untimed + config.trial.steps
    samples = 0
    start = 0.0
    for i, batch in enumerate(loader):
        if i == untimed:
            start = time.perf_counter()
        inputs, targets = split_batch(batch)
        inputs = inputs.to(device, non_blocking=eff.non_blocking)
        step(inputs, targets)
        if i >= untimed:
            samples += len(inputs)
        if i + 1 == total:
            break
    elapsed = time.perf_counter() - start
    del loader
    return elapsed * 1000 / samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    from loadertune import run_trial

    config = compose_run_config(args.overrides)
    run_trial(config)  # generate the dataset and warm the page cache
    tool, bare = [], []
    for _ in range(args.rounds):
        tool.append(run_trial(config).objective)
        bare.append(bare_loop(config))
    mt, mb = statistics.median(tool), statistics.median(bare)
    print(f"overrides: {' '.join(args.overrides) or '(defaults)'}")
    print(f"loadertune  ms/sample: median {mt:.4f}  all {[round(x, 4) for x in tool]}")
    print(f"bare loop   ms/sample: median {mb:.4f}  all {[round(x, 4) for x in bare]}")
    print(f"overhead: {100 * (mt / mb - 1):+.2f}% (median of loadertune over median of bare)")


if __name__ == "__main__":
    main()
