"""AutoLoader inside a Hugging Face ``Trainer``: ``loadertune.AutoLoaderTrainer``.

    python examples/trainer_autoloader.py                                   # one process
    torchrun --standalone --nproc-per-node=2 examples/trainer_autoloader.py # two ranks
    python examples/trainer_autoloader.py --resume    # again: resumes from the last checkpoint

``AutoLoaderTrainer`` is a ``transformers.Trainer`` whose training loader tunes itself during
the first ``tune_steps`` steps: Trainer builds and prepares its loader as always (its sampler,
``data_collator``, worker seeding, each process's share), and an AutoLoader over that share
replaces the plain loader inside. ``autoloader=`` takes AutoLoader's own arguments. Its
checkpoints hold each rank's tuning; ``train(resume_from_checkpoint=...)`` takes it back and
starts the resumed epoch after the batches Trainer trained.

The model is a tiny GPT-2 built from its config (nothing is downloaded) over generated token
sequences, each read waiting ``--read-ms`` as from a network disk; each sample carries its
index, and the script checks that no epoch delivered a sample twice.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
import transformers
from torch.utils.data import Dataset

import loadertune

SEQ, VOCAB = 16, 64


class Tokens(Dataset[dict[str, Any]]):
    """Sample i: SEQ tokens (their own next-token targets) and i itself, after a slow read."""

    def __init__(self, n: int, read_ms: float) -> None:
        self.n, self.read_s = n, read_ms / 1000

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        time.sleep(self.read_s)
        ids = torch.randint(VOCAB, (SEQ,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids.clone(), "index": i}


class Counting(loadertune.AutoLoaderTrainer):
    """AutoLoaderTrainer that notes the indices of each step's batch before the model sees it."""

    seen: list[int]

    def compute_loss(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        self.seen.extend(inputs.pop("index").tolist())
        return super().compute_loss(model, inputs, *args, **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1024)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--read-ms", type=float, default=2.0)
    parser.add_argument("--tune-steps", type=int, default=40)
    parser.add_argument("--output-dir", default="outputs/trainer_autoloader")
    parser.add_argument("--resume", action="store_true", help="from the last checkpoint")
    args = parser.parse_args()

    training = transformers.TrainingArguments(
        output_dir=args.output_dir,
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        use_cpu=not torch.cuda.is_available(),
        report_to="none",
        save_strategy="steps",
        save_steps=50,
        logging_strategy="epoch",
        disable_tqdm=True,
        remove_unused_columns=False,  # keep each sample's index for the check below
    )
    config = transformers.GPT2Config(  # built from its config: nothing is downloaded
        vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=2, n_head=4
    )
    trainer = Counting(
        model=transformers.GPT2LMHeadModel(config),
        args=training,
        train_dataset=Tokens(args.samples, args.read_ms),
        autoloader={"tune_steps": args.tune_steps},
    )
    trainer.seen = []
    trainer.train(resume_from_checkpoint=True if args.resume else None)

    assert trainer.autoloader is not None
    per_epoch = args.samples // training.world_size  # this process's share of an epoch
    if not args.resume:  # a resumed run's first epoch is the rest of the interrupted one
        for start in range(0, len(trainer.seen), per_epoch):
            indices = trainer.seen[start : start + per_epoch]
            assert len(set(indices)) == len(indices), "an epoch delivered a sample twice"
    if training.process_index == 0:
        print("settled on", trainer.autoloader.settings)
        print(trainer.autoloader.report())


if __name__ == "__main__":
    main()
