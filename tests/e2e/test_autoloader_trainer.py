"""AutoLoaderTrainer: a real Hugging Face ``Trainer`` (a tiny GPT-2 built from its config,
nothing from the hub) whose training loader is an AutoLoader, in one process and in two under
the real ``torchrun``, stopped mid-epoch at a checkpoint and resumed from it.

Each sample carries its index, taken from the batch before the model sees it: every epoch,
the interrupted run's batches and the resumed run's together hold each index exactly once
(across the ranks, with two). Run as a script (``--out``), this file is what each rank runs:
the interrupted run, then the resumed one, its batches written to ``rank<k>.json``. No test
asserts a figure timed on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from torch.utils.data import Dataset

N, BATCH, SEQ, EPOCHS = 192, 8, 6, 2  # 24 batches an epoch in one process, 12 a rank in two
TUNE = 16  # tuning steps: settled before CUT in one process, mid-tuning at CUT // 2 in two
CUT = 20  # the interrupted run stops, and saves, at this step (mid-epoch 0)
CANDIDATES = [{"num_workers": 0}, {"num_workers": 1, "prefetch_factor": 2}]
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT", "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_RUN_ID")  # fmt: skip


class Tokens(Dataset[dict[str, Any]]):
    """Sample i: SEQ tokens (their own next-token targets) and i itself."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> dict[str, Any]:
        ids = torch.randint(64, (SEQ,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids.clone(), "index": i}


def _trainer(out: Path, max_steps: int, save_steps: int, **autoloader: Any) -> Any:
    """An AutoLoaderTrainer that notes each batch's indices in ``trainer.seen``."""
    from loadertune import AutoLoaderTrainer

    class Counting(AutoLoaderTrainer):
        seen: list[list[int]]
        yielded: list[int]

        def compute_loss(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            self.seen.append(inputs.pop("index").tolist())
            self.yielded.append(self.autoloader.state_dict()["_num_yielded"])
            return super().compute_loss(model, inputs, *args, **kwargs)

    arguments = transformers.TrainingArguments(
        output_dir=str(out), num_train_epochs=EPOCHS, max_steps=max_steps, use_cpu=True,
        per_device_train_batch_size=BATCH, save_strategy="steps", save_steps=save_steps,
        report_to="none", disable_tqdm=True, logging_strategy="no", remove_unused_columns=False,
    )  # fmt: skip
    config = transformers.GPT2Config(vocab_size=64, n_positions=SEQ, n_embd=16, n_layer=1, n_head=2)
    trainer = Counting(
        model=transformers.GPT2LMHeadModel(config), args=arguments, train_dataset=Tokens(),
        autoloader={"tune_steps": TUNE, "candidates": CANDIDATES, **autoloader},
    )  # fmt: skip
    trainer.seen, trainer.yielded = [], []
    return trainer


def interrupted_then_resumed(out: Path, cut: int) -> dict[str, Any]:
    """Train to step ``cut`` (a checkpoint there), then resume from it to the end in a new
    Trainer: both runs' batches, settings and whether each settled; warnings of the resume."""
    first = _trainer(out, max_steps=cut, save_steps=cut)
    first.train()
    second = _trainer(out, max_steps=-1, save_steps=10_000)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        second.train(resume_from_checkpoint=True)
    return {
        "first": first.seen,
        "second": second.seen,
        "settings": [first.autoloader.settings, second.autoloader.settings],
        "settled": [t.autoloader.decision is not None for t in (first, second)],
        "measured": [repr(t.autoloader.state_dict()["tuner"]["measures"]) for t in (first, second)],
        "yielded_at_resume": second.yielded[0],  # by the AutoLoader, this epoch
        "warnings": [str(w.message) for w in caught if "AutoLoader" in str(w.message)],
    }


def _epochs(record: dict[str, Any], per_epoch: int) -> list[list[int]]:
    """Each epoch's indices: the interrupted run's batches followed by the resumed run's."""
    batches = record["first"] + record["second"]
    return [
        [i for b in batches[e * per_epoch : (e + 1) * per_epoch] for i in b] for e in range(EPOCHS)
    ]


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing here may reach the hub."""
    from huggingface_hub import constants as hub_constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)


def test_one_process_tunes_resumes_from_a_checkpoint_and_delivers_each_sample_once(
    tmp_path: Path,
) -> None:
    record = interrupted_then_resumed(tmp_path, CUT)
    assert len(record["first"]) == CUT
    assert len(record["first"]) + len(record["second"]) == EPOCHS * N // BATCH
    for e, indices in enumerate(_epochs(record, N // BATCH)):
        assert sorted(indices) == list(range(N)), f"epoch {e}: a sample lost or repeated"
    assert (tmp_path / f"checkpoint-{CUT}" / "autoloader_rank0.pt").is_file()
    assert record["yielded_at_resume"] > CUT, "the resumed epoch is the AutoLoader's, skipping"
    assert record["settled"][0], "tuned within TUNE steps, before the checkpoint"
    measured, remeasured = record["measured"]
    assert measured != "[]" and remeasured == measured, "settled: the resumed run measures nothing"
    first, second = record["settings"]
    assert second == first, "the resumed run keeps the setting the checkpoint settled on"
    assert first["num_workers"] in {c["num_workers"] for c in CANDIDATES}
    assert record["warnings"] == []


def test_a_checkpoint_without_tuning_is_warned_of_and_the_loader_tunes_again(
    tmp_path: Path,
) -> None:
    first = _trainer(tmp_path, max_steps=4, save_steps=4)
    first.train()
    (tmp_path / "checkpoint-4" / "autoloader_rank0.pt").unlink()  # as a plain Trainer writes
    second = _trainer(tmp_path, max_steps=-1, save_steps=10_000)
    with pytest.warns(UserWarning, match="no AutoLoader state in the checkpoint"):
        second.train(resume_from_checkpoint=str(tmp_path / "checkpoint-4"))
    indices = sorted(i for b in first.seen + second.seen[: N // BATCH - 4] for i in b)
    assert indices == list(range(N))


@pytest.mark.parametrize(
    ("key", "where"),
    [("batch_size", "per_device_train_batch_size"), ("collate_fn", "data_collator")],
)
def test_an_argument_trainer_sets_itself_is_refused_naming_where_it_goes(
    tmp_path: Path, key: str, where: str
) -> None:
    from loadertune.errors import ConfigError

    with pytest.raises(ConfigError, match=rf"^autoloader\.{key}=.*Trainer's to set.*{where}"):
        _trainer(tmp_path, max_steps=1, save_steps=1, **{key: None})


def test_two_processes_under_torchrun_deliver_each_sample_once_an_epoch_through_a_resume(
    tmp_path: Path,
) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           __file__, "--out", str(tmp_path)]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARS}
    env |= {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    records = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    per_rank = N // (2 * BATCH)
    for r, record in enumerate(records):
        assert len(record["first"]) == CUT // 2, f"rank {r}"
        assert len(record["first"]) + len(record["second"]) == EPOCHS * per_rank, f"rank {r}"
        assert (tmp_path / f"checkpoint-{CUT // 2}" / f"autoloader_rank{r}.pt").is_file()
        assert record["yielded_at_resume"] > CUT // 2, f"rank {r}: a plain loader resumed"
    by_rank = [_epochs(record, per_rank) for record in records]
    for e in range(EPOCHS):
        union = by_rank[0][e] + by_rank[1][e]
        assert sorted(union) == list(range(N)), f"epoch {e}: a sample lost or repeated"
    assert records[0]["settings"] == records[1]["settings"], "the ranks settle together"


def main() -> None:
    """One rank's part of the torchrun test: interrupted at CUT // 2, resumed, written out."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    out = parser.parse_args().out
    record = interrupted_then_resumed(out, CUT // 2)
    rank = int(os.environ["RANK"])
    (out / f"rank{rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()
