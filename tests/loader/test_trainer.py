"""trainer_arguments: an exported best_loader.yaml as Hugging Face TrainingArguments keys, what
they cannot say refused naming the key, and a real Trainer fed by them delivering every sample
exactly once per epoch (a tiny GPT-2 built from its config: nothing from the hub)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from huggingface_hub import constants as hub_constants
from torch.utils.data import Dataset

from loadertune import trainer_arguments
from loadertune.errors import ConfigError

N, BATCH, SEQ, EPOCHS = 48, 8, 6, 2  # 6 full batches an epoch


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test here may reach the hub: offline as the environment says it, and as
    huggingface_hub read it at import."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "best_loader.yaml"
    path.write_text("# exported by a verdict\n" + text)
    return path


WORKERS = "batch_size: 8\nnum_workers: 2\nprefetch_factor: 4\npersistent_workers: true\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            WORKERS + "pin_memory: false\nshuffle: true\ndrop_last: true\n",
            {
                "per_device_train_batch_size": 8,
                "dataloader_num_workers": 2,
                "dataloader_prefetch_factor": 4,
                "dataloader_persistent_workers": True,
                "dataloader_multiprocessing_context": None,
                "dataloader_pin_memory": False,
                "dataloader_drop_last": True,
                "train_sampling_strategy": "random",
            },
        ),
        (  # without workers PyTorch forbids prefetch, persistence and a start method
            "batch_size: 16\nnum_workers: 0\nshuffle: false\ndrop_last: false\n",
            {
                "per_device_train_batch_size": 16,
                "dataloader_num_workers": 0,
                "dataloader_prefetch_factor": None,
                "dataloader_persistent_workers": False,
                "dataloader_multiprocessing_context": None,
                "dataloader_pin_memory": False,
                "dataloader_drop_last": False,
                "train_sampling_strategy": "sequential",
            },
        ),
        (
            "batch_size: 4\nnum_workers: 1\nmultiprocessing_context: spawn\nnproc_per_node: 1\n",
            {"dataloader_multiprocessing_context": "spawn", "dataloader_prefetch_factor": None},
        ),
    ],
)
def test_an_exported_file_becomes_training_arguments_keys(
    tmp_path: Path, text: str, expected: dict[str, Any]
) -> None:
    arguments = trainer_arguments(_file(tmp_path, text), device="cpu")
    assert {k: arguments[k] for k in expected} == expected
    assert "accelerator_config" not in arguments  # no pinning on the CPU: no non-blocking copy


def test_non_blocking_copies_go_to_accelerates_config_where_memory_is_pinned() -> None:
    settings = {"batch_size": 8, "num_workers": 1, "pin_memory": True, "non_blocking": True}
    arguments = trainer_arguments(settings, device="cuda")
    assert arguments["dataloader_pin_memory"] is True
    assert arguments["accelerator_config"] == {"non_blocking": True}
    assert trainer_arguments(settings, device="cpu")["dataloader_pin_memory"] is False


@pytest.mark.parametrize(
    ("text", "kwargs", "key", "fix"),
    [
        ("collate_fn: mypkg.pad\n", {}, "collate_fn", "data_collator"),
        ("worker_init_fn: mypkg.seed\n", {}, "worker_init_fn", "get_train_dataloader"),
        ("", {"per_device_train_batch_size": 16}, "per_device_train_batch_size",
         "loader.batch_size=16"),
        ("", {"nproc_per_node": 2}, "nproc_per_node", "trial.nproc_per_node=2"),
        ("nproc_per_node: 2\n", {}, "nproc_per_node", "trial.nproc_per_node=1"),
        ("prefetch_factor: 4\nnum_workers: 0\n", {}, "loader.prefetch_factor", "num_workers"),
        ("num_workers: 100000\n", {}, "loader.num_workers", "num_workers<="),
    ],
)  # fmt: skip
def test_what_trainer_cannot_express_is_refused_naming_the_key(
    tmp_path: Path, text: str, kwargs: dict[str, Any], key: str, fix: str
) -> None:
    path = _file(tmp_path, "batch_size: 8\n" + text)
    with pytest.raises(ConfigError) as refused:
        trainer_arguments(path, device="cpu", **kwargs)
    assert refused.value.key == key
    assert fix in refused.value.fix


def test_the_ranks_per_node_are_read_from_the_launcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _file(tmp_path, "batch_size: 8\nnproc_per_node: 2\n")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # as torchrun and accelerate launch set it
    assert trainer_arguments(path, device="cpu")["per_device_train_batch_size"] == 8
    assert trainer_arguments(path, per_device_train_batch_size=8, device="cpu")


def test_a_collate_passed_to_trainer_itself_is_left_out(tmp_path: Path) -> None:
    path = _file(tmp_path, "batch_size: 8\ncollate_fn: mypkg.pad\n")
    arguments = trainer_arguments(path, passed_to_trainer=["collate_fn"], device="cpu")
    assert arguments["per_device_train_batch_size"] == 8
    assert not any("collate" in key for key in arguments)


class Tokens(Dataset[dict[str, Any]]):
    """Sample i: SEQ tokens (its own next-token target) and i itself, to count deliveries."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> dict[str, Any]:
        ids = torch.arange(SEQ) * (i + 1) % 32
        return {"input_ids": ids, "labels": ids.clone(), "index": i}


class Recording(transformers.Trainer):
    """Trainer that notes the indices each training step received before the model sees it."""

    seen: list[int]

    def compute_loss(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        self.seen.extend(inputs.pop("index").tolist())
        return super().compute_loss(model, inputs, *args, **kwargs)


def _tiny_model() -> Any:
    config = transformers.GPT2Config(vocab_size=32, n_positions=SEQ, n_embd=8, n_layer=1, n_head=2)
    return transformers.GPT2LMHeadModel(config)  # from its config: no download


@pytest.mark.parametrize(
    "text",
    [
        "batch_size: 8\nnum_workers: 0\nshuffle: true\ndrop_last: true\n",
        WORKERS + "shuffle: true\ndrop_last: true\n",
    ],
    ids=["no-workers", "2-workers"],
)
def test_a_real_trainer_with_the_exported_settings_delivers_every_sample_once_an_epoch(
    tmp_path: Path, text: str
) -> None:
    path = _file(tmp_path, text)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), num_train_epochs=EPOCHS, use_cpu=True,
        report_to="none", save_strategy="no", logging_strategy="no", disable_tqdm=True,
        remove_unused_columns=False,  # keep the samples' indices for Recording
        **trainer_arguments(path),
    )  # fmt: skip
    trainer = Recording(model=_tiny_model(), args=args, train_dataset=Tokens())
    trainer.seen = []
    trainer.train()

    assert len(trainer.seen) == EPOCHS * N
    for epoch in range(EPOCHS):
        assert sorted(trainer.seen[epoch * N : (epoch + 1) * N]) == list(range(N)), epoch
    assert trainer.seen[:N] != list(range(N))  # shuffled, as the file says
    built = trainer.get_train_dataloader().base_dataloader  # inside Accelerate's shard
    settings = trainer_arguments(path)
    batches = built.batch_sampler  # Accelerate's BatchSamplerShard over Trainer's batches
    assert batches.batch_size == settings["per_device_train_batch_size"] == BATCH
    assert batches.drop_last is settings["dataloader_drop_last"] is True
    assert built.num_workers == settings["dataloader_num_workers"]
    assert built.persistent_workers == settings["dataloader_persistent_workers"]
    assert built.prefetch_factor == (settings["dataloader_prefetch_factor"] if built.num_workers
                                     else None)  # fmt: skip
