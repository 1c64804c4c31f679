"""A sweep of the loader a Hugging Face Trainer would build, with Trainer's own collator
(``transformers.default_data_collator``) over token dicts and a tiny GPT-2 step, and its
answer given back to a real ``Trainer`` through ``trainer_arguments``: the collator is named
in the export, refused as a ``TrainingArguments`` key unless passed to Trainer, and the Trainer
built from the rest delivers every sample once an epoch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import transformers
import yaml

from tests._cli import SCRIPT, run_cli

pytestmark = pytest.mark.slow
BATCH, EPOCHS = 8, 2
SWEEP = [
    "dataset=custom", "dataset._target_=token_data.Tokens", "model=custom",
    "model._target_=token_data.gpt2_step", "loader.collate_fn=transformers.default_data_collator",
    f"loader.batch_size={BATCH}", "loader.num_workers=choice(0,1)", "hydra.sweeper.n_trials=2",
    "hydra.sweeper.verdict_repeats=1", "trial.steps=20",
]  # fmt: skip


def test_a_sweep_with_trainers_collator_gives_a_trainer_its_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants as hub_constants

    from loadertune import trainer_arguments
    from loadertune.errors import ConfigError
    from tests.fixtures_pkg.token_data import Tokens, tiny_gpt2

    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    sweep = run_cli(tmp_path, command=[SCRIPT, "-m", f"paths.output_root={tmp_path}", *SWEEP])
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    best = tmp_path / "conf" / "loader" / "best.yaml"
    settings = yaml.safe_load(best.read_text())
    assert settings["collate_fn"] == "transformers.default_data_collator"
    assert settings["num_workers"] in (0, 1)

    with pytest.raises(
        ConfigError,
        match=r"^collate_fn=transformers.default_data_collator: .*Trainer\(data_collator=",
    ):
        trainer_arguments(best)
    keys = trainer_arguments(best, passed_to_trainer=["collate_fn"], device="cpu")
    assert keys["per_device_train_batch_size"] == BATCH
    assert keys["dataloader_num_workers"] == settings["num_workers"]

    class Counting(transformers.Trainer):
        seen: list[int]

        def compute_loss(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            self.seen.extend(inputs.pop("index").tolist())
            return super().compute_loss(model, inputs, *args, **kwargs)

    arguments = transformers.TrainingArguments(
        output_dir=str(tmp_path / "trainer"), num_train_epochs=EPOCHS, use_cpu=True,
        report_to="none", save_strategy="no", disable_tqdm=True, logging_strategy="no",
        remove_unused_columns=False, **keys,
    )  # fmt: skip
    dataset = Tokens()
    trainer = Counting(model=tiny_gpt2(), args=arguments, train_dataset=dataset,
                       data_collator=transformers.default_data_collator)  # fmt: skip
    trainer.seen = []
    trainer.train()
    per_epoch = len(dataset) // BATCH * BATCH if keys["dataloader_drop_last"] else len(dataset)
    assert len(trainer.seen) == EPOCHS * per_epoch
    for e in range(EPOCHS):
        indices = trainer.seen[e * per_epoch : (e + 1) * per_epoch]
        assert len(set(indices)) == per_epoch, f"epoch {e}: a sample came twice"
