"""What ``DataLoader(in_order=False)`` buys on reads that rarely stall, in plain PyTorch.

A map-style dataset whose reads take 0.5 ms and about one in forty stalls 120 ms (chosen by a
hash of the index, as ``storage=object_store`` chooses its stalled reads), batch 32, a 20 ms
step (a sleep: an accelerator's step leaves the CPUs free). In order, a batch holding a stall
holds up every batch behind it; out of order, the step takes whichever batch is ready. Each
setting's time per sample over ``--steps`` steps after its look-ahead, ``--rounds`` rounds in
one process, medians. ``in_order=False`` changes the order batches arrive in (each sample
still once an epoch), so it is for training that does not depend on that order; loadertune
does not search it.

    .venv/bin/python benchmarks/in_order.py [--workers 3,4,6,8,12] [--rounds 3] [--steps 150]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
import warnings
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

STALL_EVERY, STALL_S, READ_S, STEP_S, BATCH = 40, 0.120, 0.0005, 0.020, 32


class Stalling(Dataset[torch.Tensor]):
    """Reads of ``READ_S``; about one in ``STALL_EVERY`` (by a hash of its index) stalls."""

    def __len__(self) -> int:
        return BATCH * 400

    def __getitem__(self, i: int) -> torch.Tensor:
        digest = hashlib.blake2b(i.to_bytes(8, "little"), digest_size=8).digest()
        stalled = int.from_bytes(digest, "little") % STALL_EVERY == 0
        time.sleep(STALL_S if stalled else READ_S)
        return torch.zeros(64)


def time_per_sample_ms(workers: int, in_order: bool, steps: int) -> float:
    loader = DataLoader(
        Stalling(),
        batch_size=BATCH,
        num_workers=workers,
        in_order=in_order,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
    )
    batches = iter(loader)
    for _ in range(2 * workers + 2):  # the look-ahead in its steady state
        next(batches)
    start = time.perf_counter()
    for _ in range(steps):
        next(batches)
        time.sleep(STEP_S)
    elapsed = time.perf_counter() - start
    del batches
    return elapsed * 1000.0 / (steps * BATCH)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="3,4,6,8,12")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    counts = [int(w) for w in args.workers.split(",")]
    print(f"load {' '.join(Path('/proc/loadavg').read_text().split()[:3])}", flush=True)
    times: dict[tuple[int, bool], list[float]] = {}
    for _ in range(args.rounds):
        for workers in counts:
            for in_order in (True, False):
                ms = time_per_sample_ms(workers, in_order, args.steps)
                times.setdefault((workers, in_order), []).append(ms)
    print("| num_workers | in order, ms/sample | out of order, ms/sample | out of order buys |")
    print("|---|---|---|---|")
    for workers in counts:
        kept, free = (statistics.median(times[(workers, o)]) for o in (True, False))
        print(f"| {workers} | {kept:.3f} | {free:.3f} | {kept / free - 1:+.1%} |")
    print(f"load {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")


if __name__ == "__main__":
    main()
