"""AutoLoader in a Hugging Face Accelerate training loop: ``prepare_autoloader``, not ``prepare``.

    python examples/accelerate_autoloader.py                                    # one process
    torchrun --standalone --nproc-per-node=2 examples/accelerate_autoloader.py  # two ranks

``accelerator.prepare`` re-creates every DataLoader it is given as a plain one, which would
throw an AutoLoader's tuning away, so it refuses one with a ``loadertune.ConfigError`` that
names the fix. ``loadertune.prepare_autoloader(accelerator, loader)`` returns what
``prepare`` returns for a DataLoader (Accelerate's ``DataLoaderShard``: this process's share
of each epoch, batches on ``accelerator.device``, the gradient-accumulation state) with an
AutoLoader inside it, tuning this process's share together with the other ranks. The model
and optimizer go through ``accelerator.prepare`` as usual.

Each sample waits ``--read-ms``, as a read from a network disk does. Each epoch checks that
the processes together saw every index exactly once; the main process prints the mean loss,
then the settings every rank settled on and what the tuning measured.
"""

from __future__ import annotations

import argparse
import time

import torch
from accelerate import Accelerator
from accelerate.utils import gather_object
from torch.utils.data import Dataset

import loadertune
from loadertune import AutoLoader


class Reads(Dataset[tuple[torch.Tensor, torch.Tensor, int]]):
    """Sample i: 8 features, their sum as the target, and i itself (to check the sharding)."""

    def __init__(self, n: int, read_ms: float) -> None:
        self.n, self.read_s = n, read_ms / 1000

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        time.sleep(self.read_s)
        x = torch.randn(8, generator=torch.Generator().manual_seed(i))
        return x, x.sum(0, keepdim=True), i


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--read-ms", type=float, default=1.0)
    parser.add_argument("--cpu", action="store_true", help="train on the CPU even with a GPU")
    args = parser.parse_args()

    # First, before the loader: under torchrun it starts the process group. Without a GPU it
    # needs cpu=True to shard: plain Accelerator() there starts the group but calls itself a
    # single process, and every rank would train on the whole dataset.
    accelerator = Accelerator(cpu=args.cpu or not torch.accelerator.is_available())
    dataset = Reads(args.samples, args.read_ms)
    steps = args.epochs * len(dataset) // (accelerator.num_processes * args.batch_size)
    loader = AutoLoader(dataset, batch_size=args.batch_size, shuffle=True, tune_steps=steps // 2)
    loader = loadertune.prepare_autoloader(accelerator, loader)  # not accelerator.prepare(loader)
    tuned = loader.base_dataloader  # the AutoLoader inside: settings, decision, report()

    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer = accelerator.prepare(model, optimizer)

    for epoch in range(args.epochs):  # no set_epoch: the prepared loader reshuffles each epoch
        seen, losses = [], []
        for x, y, index in loader:  # this process's share, on accelerator.device
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
            # every process's indices; at the last batch without the repeats Accelerate pads
            # with when the dataset does not divide into processes x batch size
            seen.append(accelerator.gather_for_metrics(index))
        everyone = torch.cat(seen).tolist()
        assert sorted(everyone) == list(range(len(dataset))), "an index was missed or repeated"
        mean = sum(losses) / len(losses)
        accelerator.print(f"epoch {epoch}: mean loss {mean:.4f}; every index exactly once")

    everyones = gather_object([tuned.settings])  # the same on every rank: they tune together
    assert all(s == tuned.settings for s in everyones), everyones
    accelerator.print(f"{accelerator.num_processes} process(es) settled on {tuned.settings}")
    accelerator.print(tuned.report())
    accelerator.end_training()


if __name__ == "__main__":
    main()
