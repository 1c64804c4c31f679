"""AutoLoader in a data-parallel training loop under torchrun: one loader per rank, tuned together.

    torchrun --standalone --nproc-per-node=2 examples/autoloader_torchrun.py
    torchrun --standalone --nproc-per-node=2 examples/autoloader_torchrun.py --workers 4

The first runs AutoLoader (tuning within the first half of the run), the second a plain
``DataLoader`` with 4 workers per rank, for comparison. Each sample waits ``--read-ms`` (a
latency-bound read); each step sleeps ``--step-ms`` (the accelerator) and all-reduces a
tensor, as DDP's gradient all-reduce paces the ranks. Rank 0 prints the wall time of the
epochs and the settings every rank settled on (the same on all of them), and checks that
the ranks together saw every index exactly once per epoch.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from loadertune import AutoLoader


class Reads(Dataset[torch.Tensor]):
    """Sample i is ``[i] * 8``, after waiting ``read_ms`` as a network disk makes one wait."""

    def __init__(self, n: int, read_ms: float) -> None:
        self.n, self.read_s = n, read_ms / 1000

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.read_s)
        return torch.full((8,), i, dtype=torch.int64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=None, help="a fixed DataLoader instead")
    parser.add_argument("--samples", type=int, default=4288)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--read-ms", type=float, default=2.0)
    parser.add_argument("--step-ms", type=float, default=4.0)
    args = parser.parse_args()

    dist.init_process_group("gloo")  # before the loader: AutoLoader finds the group then
    rank, world = dist.get_rank(), dist.get_world_size()
    ds = Reads(args.samples, args.read_ms)
    sampler: DistributedSampler[torch.Tensor] = DistributedSampler(ds, shuffle=True, seed=0)
    loader: Any
    if args.workers is None:
        steps = args.epochs * len(ds) // (world * args.batch_size)
        loader = AutoLoader(ds, batch_size=args.batch_size, sampler=sampler, tune_steps=steps // 2)
    else:
        w = args.workers
        loader = DataLoader(ds, batch_size=args.batch_size, sampler=sampler, num_workers=w,
                            persistent_workers=w > 0)  # fmt: skip

    start = time.perf_counter()
    for epoch in range(args.epochs):
        loader.sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
        seen: list[int] = []
        for batch in loader:
            seen += batch[:, 0].tolist()
            grads = torch.ones(1)
            dist.all_reduce(grads)  # where DDP would all-reduce the gradients
            time.sleep(args.step_ms / 1000)
        everyone: list[Any] = [None] * world
        dist.all_gather_object(everyone, seen)
        assert sorted(i for part in everyone for i in part) == list(range(len(ds)))
    wall = time.perf_counter() - start

    chosen = loader.settings if isinstance(loader, AutoLoader) else {"num_workers": args.workers}
    everyone = [None] * world
    dist.all_gather_object(everyone, chosen)
    if rank == 0:
        same = all(c == chosen for c in everyone)
        print(f"wall {wall:.2f} s for {args.epochs} epochs on {world} ranks; every index once")
        print(f"settings per rank: {chosen} (the same on every rank: {same})")
        if isinstance(loader, AutoLoader):
            print(loader.report())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
