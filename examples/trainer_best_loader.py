"""A sweep's answer in a Hugging Face ``Trainer``: ``best_loader.yaml`` as ``TrainingArguments``.

    loadertune -m                                          # the sweep: writes the file
    python examples/trainer_best_loader.py                 # outputs/conf/loader/best.yaml
    python examples/trainer_best_loader.py --loader outputs/multirun/<day>/<time>/best_loader.yaml
    torchrun --nproc-per-node=2 examples/trainer_best_loader.py   # a file tuned for 2 ranks

Trainer builds its training loader itself, from ``TrainingArguments``:
``loadertune.trainer_arguments(path)`` gives the keys (``per_device_train_batch_size``,
``dataloader_num_workers``, ``dataloader_prefetch_factor``, ``dataloader_pin_memory``,
``dataloader_persistent_workers``, ...) that make it build the loader the sweep measured. A
file naming a ``collate_fn`` is refused naming the key unless you pass that callable as
``Trainer(data_collator=...)`` and say so (``passed_to_trainer=["collate_fn"]``); a file tuned
at another batch size per device, or for another number of ranks per node, is refused too.

The model is a tiny GPT-2 built from its config (nothing is downloaded) over generated token
sequences; each sample carries its index, and the script checks that no epoch delivered a
sample twice (and, in one process without ``drop_last``, that each epoch delivered them all).
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
import transformers
from torch.utils.data import Dataset

import loadertune

SEQ, VOCAB = 16, 64


class Tokens(Dataset[dict[str, Any]]):
    """Sample i: SEQ tokens (their own next-token targets) and i itself."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        ids = torch.randint(VOCAB, (SEQ,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids.clone(), "index": i}


class Counting(transformers.Trainer):
    """Trainer that notes the indices of each step's batch before the model sees it."""

    seen: list[int]

    def compute_loss(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        self.seen.extend(inputs.pop("index").tolist())
        return super().compute_loss(model, inputs, *args, **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loader", default="outputs/conf/loader/best.yaml")
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--output-dir", default="outputs/trainer_example")
    args = parser.parse_args()

    loader_keys = loadertune.trainer_arguments(args.loader)  # refuses what Trainer cannot say
    print("from", args.loader, ":", loader_keys)
    training = transformers.TrainingArguments(
        output_dir=args.output_dir,
        num_train_epochs=args.epochs,
        use_cpu=not torch.cuda.is_available(),
        report_to="none",
        save_strategy="no",
        logging_strategy="epoch",
        disable_tqdm=True,
        remove_unused_columns=False,  # keep each sample's index for the check below
        **loader_keys,
    )
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=2, n_head=4
    )  # built from its config: nothing is downloaded
    model = transformers.GPT2LMHeadModel(config)
    trainer = Counting(model=model, args=training, train_dataset=Tokens(args.samples))
    trainer.seen = []
    trainer.train()

    per_epoch = len(trainer.seen) // args.epochs  # this process's samples an epoch
    for epoch in range(args.epochs):
        indices = trainer.seen[epoch * per_epoch : (epoch + 1) * per_epoch]
        assert len(set(indices)) == len(indices), f"epoch {epoch}: a sample came twice"
        if training.world_size == 1 and not training.dataloader_drop_last:
            assert sorted(indices) == list(range(args.samples)), f"epoch {epoch}: one missed"
    print(f"each epoch delivered this process's {per_epoch} samples once each")


if __name__ == "__main__":
    main()
