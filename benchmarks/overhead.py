"""Instrumentation overhead: loadertune's time per sample against a bare loop, interleaved.

The bare loop does the same work (same dataset, index stream, warm-up, loader, copy and
model step, and as many timed steps as the trial just timed) with nothing but two clock
reads around the timed window: no per-step marks, no callback, no sampler process, no
interference meter, no precision check. Rounds alternate A B A B so drift on a shared
machine hits both alike; each round gives one ratio (trial over bare), and the figure is
the median ratio with its quartiles. The load average and the CPU other processes used
during each trial's window are printed beside it: on a busy machine read the spread first.

    .venv/bin/python benchmarks/overhead.py [--rounds 9] [override ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from _common import compose_run_config


def bare_loop(config: Any, steps: int) -> float:
    """Time per sample (ms) of ``for batch in loader`` doing the trial's work for ``steps``."""
    import torch

    from loadertune.config import in_flight
    from loadertune.datasets import build_dataset
    from loadertune.loader import build_dataloader, effective_settings, resolve_device, to_device
    from loadertune.measure import stream_sampler, warmup_steps
    from loadertune.models import build_train_step, split_batch

    tc = config.trial
    torch.manual_seed(tc.seed)
    device = torch.device(resolve_device(tc.device))
    dataset = build_dataset(config)
    step = build_train_step(config.model, dataset[0], dataset.num_classes, device, "x")
    eff = effective_settings(config.loader, device)
    untimed = 1 + warmup_steps(tc.warmup_steps, eff.num_workers, eff.prefetch_factor)
    total = untimed + steps
    length = (total + in_flight(eff.num_workers, eff.prefetch_factor) + 1) * (eff.batch_size or 1)
    stream = stream_sampler(len(dataset), length, eff.shuffle, torch.Generator().manual_seed(0))
    loader = build_dataloader(
        dataset, eff, device, sampler=stream, generator=torch.Generator().manual_seed(0)
    )
    samples = 0
    start = 0.0
    for i, batch in enumerate(loader):
        if i == untimed:
            start = time.perf_counter()
        batch = to_device(batch, device, eff.non_blocking)
        step(batch)
        inputs, _ = split_batch(batch)
        if i >= untimed:
            samples += len(inputs)
        if i + 1 == total:
            break
    elapsed = time.perf_counter() - start
    del loader
    return elapsed * 1000 / samples


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile)."""
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    from loadertune import run_trial

    config = compose_run_config(args.overrides)
    run_trial(config)  # generate the dataset and warm the page cache
    load_before = os.getloadavg()
    tool, bare, ratios, other = [], [], [], []
    for _ in range(args.rounds):
        result = run_trial(config)
        tool.append(result.objective)
        other.append(getattr(result, "other_cpu_percent", float("nan")))  # older versions lack it
        bare.append(bare_loop(config, result.summary.steps))
        ratios.append(tool[-1] / bare[-1])
    load_after = os.getloadavg()
    q1, q2, q3 = quartiles(ratios)
    print(f"overrides: {' '.join(args.overrides) or '(defaults)'}")
    print(f"load average (1, 5, 15 min): before {load_before}, after {load_after}")
    shown = ", ".join(f"{o:.0f}" for o in other)  # nan where the trial does not measure it
    print(f"other processes during the trials' windows: [{shown}]% of a core")
    print(f"loadertune  ms/sample: median {statistics.median(tool):.4f}  all {_r(tool)}")
    print(f"bare loop   ms/sample: median {statistics.median(bare):.4f}  all {_r(bare)}")
    print(f"ratio per round: {_r(ratios)}")
    print(
        f"overhead: {100 * (q2 - 1):+.2f}% (median of the {len(ratios)} paired ratios; "
        f"quartiles {100 * (q1 - 1):+.2f}% .. {100 * (q3 - 1):+.2f}%)"
    )


def _r(values: list[float]) -> list[float]:
    return [round(v, 4) for v in values]


if __name__ == "__main__":
    main()
