"""AutoLoader inside PyTorch Lightning: a real ``Trainer`` drives the train and val loaders.

Every sample carries its index, and the ``LightningModule`` records the indices each
training epoch and each validation run saw, so exactly-once is checked from what the model
received, never from the loader's own bookkeeping. Three ways in: loaders built in the
module's ``train_dataloader``/``val_dataloader`` hooks, loaders built outside and passed to
``trainer.fit``, and (under DDP, 2 CPU ranks on gloo) loaders Lightning re-instantiates to
inject its ``DistributedSampler``; plus checkpoints written mid-epoch and at an epoch's end,
each resumed by a new ``Trainer``.

Run as a script (under ``python -m torch.distributed.run --nproc-per-node=2``), this file is
the training script each rank runs (``--case``); each rank writes what it saw to
``rank<k>.json`` and the tests assert from those files. No test asserts a timing.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from loadertune import AutoLoader

pytestmark = pytest.mark.slow

N_TRAIN, N_VAL, BATCH, TUNE = 128, 128, 4, 16  # 32 batches per epoch on one device, 16 on 2
SANITY = 2  # validation batches of Lightning's sanity check
W0 = {"num_workers": 0}
W1 = {"num_workers": 1, "prefetch_factor": 2, "persistent_workers": True}

# Lightning's advice to raise num_workers, given on machines with more than 2 cores per
# device: AutoLoader chooses num_workers itself, so the advice is moot here.
FEW_WORKERS = "ignore:The '.*_dataloader' does not have many workers:UserWarning"


class Indexed(Dataset[dict[str, torch.Tensor]]):
    """Sample i carries its index, and a feature vector to train on."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"index": torch.tensor(i), "x": torch.full((4,), i / self.n)}


def train_loader(sampler: Any = None) -> AutoLoader:
    """The train AutoLoader: shuffled (or the sampler given), tuned over two candidates."""
    return AutoLoader(
        Indexed(N_TRAIN), batch_size=BATCH, shuffle=None if sampler else True, sampler=sampler,
        tune_steps=TUNE, candidates=[W0, W1], probe_timeout_s=20,
    )  # fmt: skip


def val_loader(sampler: Any = None) -> AutoLoader:
    """The val AutoLoader: in order (or the sampler given), tuned as the train loader."""
    return AutoLoader(
        Indexed(N_VAL), batch_size=BATCH, sampler=sampler,
        tune_steps=TUNE, candidates=[W0, W1], probe_timeout_s=20,
    )  # fmt: skip


class Recorder(LightningModule):
    """A linear model that records the indices of every batch it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.train_seen: dict[int, list[int]] = {}  # epoch -> indices, in the order trained
        self.val_runs: list[dict[str, Any]] = []  # each validation run: sanity?, indices

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.train_seen.setdefault(self.current_epoch, []).extend(batch["index"].tolist())
        return self.layer(batch["x"]).pow(2).mean()

    def on_validation_epoch_start(self) -> None:
        self.val_runs.append({"sanity": self.trainer.sanity_checking, "seen": []})

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.val_runs[-1]["seen"].extend(batch["index"].tolist())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Hooked(Recorder):
    """The loaders built in the module's hooks, as Lightning's docs build them."""

    def __init__(self, own_sampler: bool = False) -> None:
        super().__init__()
        self.own_sampler = own_sampler

    def train_dataloader(self) -> AutoLoader:
        if not self.own_sampler:
            return train_loader()
        return train_loader(DistributedSampler(Indexed(N_TRAIN), shuffle=True, seed=5))

    def val_dataloader(self) -> AutoLoader:
        if not self.own_sampler:
            return val_loader()
        return val_loader(DistributedSampler(Indexed(N_VAL), shuffle=False))


def quiet_trainer(**kwargs: Any) -> Trainer:
    """A CPU Trainer that prints and writes nothing it does not need to."""
    options: dict[str, Any] = {
        "accelerator": "cpu", "devices": 1, "max_epochs": 2, "logger": False,
        "enable_progress_bar": False, "enable_checkpointing": False,
        "enable_model_summary": False, "num_sanity_val_steps": SANITY,
    }  # fmt: skip
    return Trainer(**{**options, **kwargs})


def used_loaders(trainer: Trainer) -> tuple[AutoLoader, AutoLoader | None]:
    """The train and val loaders the Trainer iterated (Lightning may have rebuilt them)."""
    train, val = trainer.train_dataloader, trainer.val_dataloaders
    assert isinstance(train, AutoLoader), type(train)
    assert val is None or isinstance(val, AutoLoader), type(val)
    return train, val


def once_per_epoch(seen: dict[Any, list[int]], n: int, epochs: int) -> None:
    """Every index exactly once in each epoch, and each epoch in a new shuffled order."""
    assert sorted(int(e) for e in seen) == list(range(epochs))
    for e, indices in seen.items():
        assert sorted(indices) == list(range(n)), f"epoch {e}: {len(indices)} indices"
    orders = [seen[k] for k in sorted(seen, key=int)]
    assert all(a != b for a, b in itertools.pairwise(orders))


def check_val_runs(runs: list[dict[str, Any]], expected: list[int]) -> None:
    """The sanity check saw its first batches, then each full validation every val index
    once, in the loader's order (the sanity check's abandoned epoch does not carry over)."""
    assert [r["sanity"] for r in runs] == [True, False, False]
    assert runs[0]["seen"] == expected[: SANITY * BATCH]
    for run in runs[1:]:
        assert run["seen"] == expected


# ---------------------------------------------------------------- one device, in process


@pytest.mark.filterwarnings(FEW_WORKERS)
def test_a_trainer_runs_the_loaders_built_in_its_hooks() -> None:
    model = Hooked()
    trainer = quiet_trainer()
    trainer.fit(model)
    train, val = used_loaders(trainer)
    assert isinstance(train, DataLoader) and isinstance(val, DataLoader)
    once_per_epoch(model.train_seen, N_TRAIN, epochs=2)
    check_val_runs(model.val_runs, list(range(N_VAL)))
    assert train.decision is not None and val is not None and val.decision is not None
    assert train.settings["num_workers"] in (0, 1)


@pytest.mark.filterwarnings(FEW_WORKERS)
def test_a_trainer_runs_loaders_passed_to_fit() -> None:
    model = Recorder()
    train, val = train_loader(), val_loader()
    trainer = quiet_trainer()
    trainer.fit(model, train_dataloaders=train, val_dataloaders=val)
    assert used_loaders(trainer) == (train, val)  # one device: Lightning keeps them
    once_per_epoch(model.train_seen, N_TRAIN, epochs=2)
    check_val_runs(model.val_runs, list(range(N_VAL)))
    assert train.decision is not None and val.decision is not None


class SaveAt(Callback):
    """Saves a checkpoint after the training step that reaches ``step``, mid-epoch (one
    saved after ``fit`` returns, Lightning counts as the epoch's end: see below)."""

    def __init__(self, step: int, path: Path) -> None:
        self.step, self.path = step, path

    def on_train_batch_end(self, trainer: Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            trainer.save_checkpoint(self.path)


@pytest.mark.filterwarnings(FEW_WORKERS)
def test_resume_mid_epoch_from_a_lightning_checkpoint(tmp_path: Path) -> None:
    """Checkpointed at step 12 of epoch 0 (mid-tuning, on the 1-worker probe, whose
    look-ahead is in flight) and stopped there by max_steps; a new Trainer resumes from the
    checkpoint and trains the rest of epoch 0, then epoch 1: each index exactly once in each
    epoch across both runs.

    The checkpoint is written by a callback at that step: once ``fit`` stopped by max_steps
    returns, Lightning has counted the epoch as done, and a checkpoint written then resumes
    at the next epoch without restoring the loaders' state.
    """
    stop, ckpt = 12, tmp_path / "mid.ckpt"  # tuning: 8 steps on w0, then w1 until step 16
    first = Hooked()
    no_val = {"limit_val_batches": 0, "num_sanity_val_steps": 0}
    trainer = quiet_trainer(max_steps=stop, callbacks=[SaveAt(stop, ckpt)], **no_val)
    trainer.fit(first)
    assert sum(map(len, first.train_seen.values())) == stop * BATCH
    assert used_loaders(trainer)[0].decision is None  # still tuning
    saved = torch.load(ckpt, weights_only=False)
    assert saved["loops"]["fit_loop"]["state_dict"]["combined_loader"]  # AutoLoader's state

    second = Hooked()
    resumed = quiet_trainer(**no_val)
    resumed.fit(second, ckpt_path=ckpt)
    assert len(second.train_seen[0]) == N_TRAIN - stop * BATCH  # the rest, not the epoch again
    joined = {0: first.train_seen[0] + second.train_seen[0], 1: second.train_seen[1]}
    once_per_epoch(joined, N_TRAIN, epochs=2)
    assert used_loaders(resumed)[0].decision is not None


class SaveAtEpochEnd(Callback):
    """Saves a checkpoint at the end of each training epoch, as ModelCheckpoint does."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_train_epoch_end(self, trainer: Trainer, *args: Any) -> None:
        trainer.save_checkpoint(self.path)


@pytest.mark.filterwarnings(FEW_WORKERS)
def test_resume_at_an_epoch_end_draws_the_next_epochs_order(tmp_path: Path) -> None:
    """Resumed from a checkpoint written at the end of epoch 0, the new Trainer's epoch 1
    comes in the order its sampler draws for epoch 1, as a DataLoader's does. Lightning
    calls iter() on the loader before ``sampler.set_epoch(1)`` there (and at every fit's
    first epoch): the order must be drawn at the first batch, not at iter()."""
    ckpt = tmp_path / "epoch0.ckpt"

    def loader() -> AutoLoader:  # one replica: a DistributedSampler ordered by set_epoch
        one = DistributedSampler(Indexed(N_TRAIN), num_replicas=1, rank=0, seed=3)
        return train_loader(one)

    no_val = {"limit_val_batches": 0, "num_sanity_val_steps": 0}  # val_loader(): never run
    first = Recorder()
    trainer = quiet_trainer(max_epochs=1, callbacks=[SaveAtEpochEnd(ckpt)], **no_val)
    trainer.fit(first, loader(), val_loader())
    second = Recorder()
    quiet_trainer(max_epochs=2, **no_val).fit(second, loader(), val_loader(), ckpt_path=ckpt)
    assert sorted(second.train_seen) == [1]
    expected = DistributedSampler(Indexed(N_TRAIN), num_replicas=1, rank=0, seed=3)
    expected.set_epoch(1)
    assert second.train_seen[1] != first.train_seen[0], "epoch 0's order again"
    assert second.train_seen[1] == list(expected)


# ---------------------------------------------------------------- DDP, 2 ranks under torchrun


def _ddp(args: argparse.Namespace) -> None:
    """Two epochs under DDP on this rank; what it saw, to ``rank<k>.json``."""
    case = args.case
    trainer = Trainer(
        accelerator="cpu", devices=2, strategy="ddp", max_epochs=2, logger=False,
        enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False,
        num_sanity_val_steps=SANITY, use_distributed_sampler=case != "own",
    )  # fmt: skip
    model: Recorder
    if case == "outside":  # built before the process group exists; Lightning rebuilds them
        model = Recorder()
        trainer.fit(model, train_dataloaders=train_loader(), val_dataloaders=val_loader())
    else:
        model = Hooked(own_sampler=case == "own")
        trainer.fit(model)
    train, val = used_loaders(trainer)
    samplers = [type(loader.sampler).__name__ for loader in (train, val)]
    fields = {
        "train": model.train_seen, "val": model.val_runs, "samplers": samplers,
        "settings": train.settings, "val_settings": val.settings if val else None,
        "settled": [loader.decision is not None for loader in (train, val)],
        "reports": [loader.report() for loader in (train, val)],
    }  # fmt: skip
    Path(args.out, f"rank{trainer.global_rank}.json").write_text(json.dumps(fields))


def _torchrun(out: Path, *args: str) -> list[dict[str, Any]]:
    """This file under the real launcher, two ranks on loopback; their output on failure."""
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
        __file__, "--out", str(out), *args,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


@pytest.mark.parametrize("case", ["injected", "own", "outside"])
def test_ddp_ranks_split_each_epoch_and_agree(tmp_path: Path, case: str) -> None:
    """injected: use_distributed_sampler=True, Lightning re-instantiates the hooks' loaders
    with its DistributedSampler; own: use_distributed_sampler=False, the hooks pass their
    own; outside: built before fit (no process group yet), rebuilt by Lightning from the
    instances' attributes. Each epoch and each full validation, the two ranks' indices
    together are every index exactly once; both ranks settle on the same settings."""
    ranks = _torchrun(tmp_path, "--case", case)
    for r in ranks:
        assert r["samplers"] == ["DistributedSampler", "DistributedSampler"]
        assert r["settled"] == [True, True], r["reports"]
        assert [v["sanity"] for v in r["val"]] == [True, False, False]
        assert len(r["val"][0]["seen"]) == SANITY * BATCH
    union = {e: ranks[0]["train"][e] + ranks[1]["train"][e] for e in ranks[0]["train"]}
    once_per_epoch(union, N_TRAIN, epochs=2)
    for run in (1, 2):
        both = ranks[0]["val"][run]["seen"] + ranks[1]["val"][run]["seen"]
        assert sorted(both) == list(range(N_VAL))
    assert ranks[0]["settings"] == ranks[1]["settings"]
    assert ranks[0]["val_settings"] == ranks[1]["val_settings"]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--case", choices=["injected", "own", "outside"], required=True)
    _ddp(parser.parse_args())
