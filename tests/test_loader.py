"""build_dataloader applies PyTorch's rules and builds the loader a trial measured."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from omegaconf import OmegaConf

from loadertune import build_dataloader
from loadertune.config import LoaderConfig
from loadertune.errors import ConfigError
from loadertune.loader import dataloader_kwargs, effective_settings


class Squares(torch.utils.data.Dataset[tuple[torch.Tensor, int]]):
    def __len__(self) -> int:
        return 20

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.tensor([float(i * i)]), i


@pytest.mark.parametrize(
    ("settings", "present", "absent"),
    [
        (
            {"num_workers": 0},
            {"batch_size", "num_workers"},
            {"prefetch_factor", "persistent_workers", "multiprocessing_context"},
        ),
        (
            {"num_workers": 2},
            {"persistent_workers"},
            {"prefetch_factor", "multiprocessing_context"},
        ),
        (
            {"num_workers": 2, "prefetch_factor": 3, "multiprocessing_context": "spawn"},
            {"prefetch_factor", "multiprocessing_context"},
            set(),
        ),
    ],
)
def test_kwargs_leave_out_what_pytorch_forbids(
    settings: dict[str, Any], present: set[str], absent: set[str]
) -> None:
    kwargs = dataloader_kwargs(LoaderConfig(**settings))
    assert present <= kwargs.keys()
    assert not absent & kwargs.keys()


def test_pin_memory_is_a_recorded_no_op_without_accelerator() -> None:
    eff = effective_settings(LoaderConfig(pin_memory=True), device="cpu")
    assert eff.pin_memory is False
    assert eff.non_blocking is False
    assert effective_settings(LoaderConfig(pin_memory=True), device="cuda").pin_memory is True


@pytest.mark.parametrize(
    "cfg",
    [
        LoaderConfig(batch_size=5, num_workers=0, shuffle=False),
        {"batch_size": 5, "num_workers": 0, "shuffle": False},
        OmegaConf.create({"batch_size": 5, "num_workers": 0, "shuffle": False}),
    ],
    ids=["dataclass", "dict", "omegaconf"],
)
def test_accepts_dataclass_dict_and_omegaconf(cfg: Any) -> None:
    loader = build_dataloader(Squares(), cfg, device="cpu")
    batches = list(loader)
    assert len(batches) == 4
    assert batches[0][1].tolist() == [0, 1, 2, 3, 4]


def test_real_workers_deliver_every_sample_once() -> None:
    cfg = {
        "batch_size": 4,
        "num_workers": 2,
        "prefetch_factor": 2,
        "shuffle": True,
        "drop_last": False,
    }
    loader = build_dataloader(
        Squares(), cfg, device="cpu", generator=torch.Generator().manual_seed(0)
    )
    labels = sorted(int(i) for _, ys in loader for i in ys)
    assert labels == list(range(20))
    assert loader.num_workers == 2
    assert loader.prefetch_factor == 2


def test_invalid_settings_raise_before_building() -> None:
    with pytest.raises(ConfigError, match=r"^loader\.prefetch_factor=2: needs"):
        build_dataloader(Squares(), {"num_workers": 0, "prefetch_factor": 2})
    with pytest.raises(ConfigError, match=r"^loader\.num_workers"):
        build_dataloader(Squares(), {"num_workers": "many"})
