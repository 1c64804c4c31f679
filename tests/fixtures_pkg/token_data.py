"""Token sequences and a tiny GPT-2 step, as a Hugging Face Trainer trains them, for a sweep
with Trainer's own collator (``loader.collate_fn=transformers.default_data_collator``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

SEQ, VOCAB = 6, 64


class Tokens(torch.utils.data.Dataset[dict[str, Any]]):
    """Sample i: SEQ tokens (their own next-token targets) and i itself, as a dict of fields."""

    def __init__(self, length: int = 96) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict[str, Any]:
        ids = torch.randint(VOCAB, (SEQ,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids.clone(), "index": i}


def tiny_gpt2() -> Any:
    """A GPT-2 of one small layer, built from its config: nothing is downloaded."""
    import transformers

    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=16, n_layer=1,
                                     n_head=2)  # fmt: skip
    return transformers.GPT2LMHeadModel(config)


def gpt2_step(batch: Any, device: torch.device) -> Callable[[Any], None]:
    """A training step of the tiny GPT-2 on a collated batch of :class:`Tokens` (a dict)."""
    model = tiny_gpt2().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(batch: dict[str, torch.Tensor]) -> None:
        out = model(input_ids=batch["input_ids"], labels=batch["labels"])
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    return step
