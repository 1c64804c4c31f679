"""AutoLoader in PyTorch Lightning: the train and val loaders tune themselves while it trains.

    python examples/lightning_autoloader.py
    torchrun --standalone --nproc-per-node=2 examples/lightning_autoloader.py --devices 2

The module builds its loaders in ``train_dataloader``/``val_dataloader`` as any Lightning
module does; AutoLoader tunes ``num_workers`` (up to ``--max-workers``), ``prefetch_factor``
and ``persistent_workers`` within the first ``--tune-steps`` steps. With 2 devices (DDP on
CPU, gloo) Lightning re-creates each AutoLoader with its ``DistributedSampler``, and the
ranks tune together and settle on the same settings. Each sample carries its index: at the
end of every epoch the module gathers the indices all ranks trained on and checks that each
index came exactly once. Each sample waits ``--read-ms`` (a latency-bound read).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from torch.utils.data import Dataset

from loadertune import AutoLoader


class Reads(Dataset[dict[str, torch.Tensor]]):
    """Sample i: its index and 8 features, after waiting ``read_ms`` as a network disk does."""

    def __init__(self, n: int, read_ms: float) -> None:
        self.n, self.read_s = n, read_ms / 1000

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        time.sleep(self.read_s)
        return {"index": torch.tensor(i), "x": torch.full((8,), i / self.n)}


class Regression(LightningModule):
    """A linear model; it keeps the indices it trains on to check each epoch's coverage."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.args = args
        self.layer = torch.nn.Linear(8, 1)
        self.seen: list[int] = []  # this rank's indices in the current epoch

    def _loader(self, n: int, shuffle: bool) -> AutoLoader:
        return AutoLoader(
            Reads(n, self.args.read_ms),
            batch_size=self.args.batch_size,
            shuffle=shuffle,
            tune_steps=self.args.tune_steps,
            max_workers=self.args.max_workers,
        )

    def train_dataloader(self) -> AutoLoader:
        return self._loader(self.args.samples, shuffle=True)

    def val_dataloader(self) -> AutoLoader:
        return self._loader(self.args.samples // 4, shuffle=False)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.seen += batch["index"].tolist()
        return self.layer(batch["x"]).pow(2).mean()

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log("val_loss", self.layer(batch["x"]).pow(2).mean(), sync_dist=True)

    def on_train_epoch_end(self) -> None:
        counts = torch.bincount(torch.tensor(self.seen), minlength=self.args.samples)
        counts = self.trainer.strategy.reduce(counts, reduce_op="sum")  # all ranks' counts
        assert counts.eq(1).all(), "an index was missed or repeated"
        self.print(f"epoch {self.current_epoch}: every index exactly once across the ranks")
        self.seen = []

    def on_train_end(self) -> None:
        loader: Any = self.trainer.train_dataloader  # the AutoLoader Lightning iterated
        chosen = {k: loader.settings[k] for k in ("num_workers", "prefetch_factor")}
        print(f"rank {self.global_rank} settled on {chosen}")  # the same on every rank
        self.print(loader.report())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=1, help="CPU processes (2: DDP)")
    parser.add_argument("--samples", type=int, default=4096, help="a multiple of the ranks")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--tune-steps", type=int, default=160)
    parser.add_argument("--max-workers", type=int, default=4)
    parser.add_argument("--read-ms", type=float, default=1.0)
    args = parser.parse_args()

    trainer = Trainer(
        accelerator="cpu",
        devices=args.devices,
        strategy="ddp" if args.devices > 1 else "auto",
        max_epochs=args.epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Regression(args))


if __name__ == "__main__":
    main()
