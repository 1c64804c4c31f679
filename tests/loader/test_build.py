"""build_dataloader applies PyTorch's rules and builds the loader a trial measured."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf

from loadertune import build_dataloader
from loadertune.checks._preflight import worker_cap
from loadertune.config._typed import LoaderConfig
from loadertune.errors import ConfigError
from loadertune.loader._build import (
    dataloader_kwargs,
    effective_settings,
    loader_config,
    read_loader_yaml,
    tuned_for,
)


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


def _best(tmp_path: Path, *lines: str) -> Path:
    """A best_loader.yaml on disk, with ``lines`` after two settings."""
    path = tmp_path / "best_loader.yaml"
    path.write_text("\n".join(["batch_size: 4", "shuffle: false", *lines]) + "\n")
    return path


@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # PyTorch's, for the cap
def test_a_files_worker_count_is_capped_as_the_command_line_caps_it(tmp_path: Path) -> None:
    cap = worker_cap().workers  # the command line's rule (preflight.check_worker_count)
    loader = build_dataloader(Squares(), _best(tmp_path, f"num_workers: {cap}"), device="cpu")
    assert loader.num_workers == cap  # built, never iterated: no worker started
    for count in (cap + 1, 1000000):
        with pytest.raises(ConfigError, match=rf"^loader\.num_workers={count}: would start .*Fix"):
            build_dataloader(Squares(), _best(tmp_path, f"num_workers: {count}"), device="cpu")


@pytest.mark.parametrize("value", ["abc", "0", "-4", "true", "2.5", "many ranks", "CPUS+1"])
def test_a_files_nproc_per_node_must_be_a_count_of_ranks(tmp_path: Path, value: str) -> None:
    value = value.replace("CPUS+1", str((os.cpu_count() or 1) + 1))
    path = _best(tmp_path, "num_workers: 0", f"nproc_per_node: {value}")
    where = rf"^nproc_per_node=\S.*: in {re.escape(str(path))} must be .*an integer from 1"
    with pytest.raises(ConfigError, match=where):
        build_dataloader(Squares(), path, device="cpu")
    with pytest.raises(ConfigError, match=where):
        loader_config(path)


def test_a_files_nproc_per_node_in_range_is_read(tmp_path: Path) -> None:
    assert tuned_for(read_loader_yaml(_best(tmp_path, f"nproc_per_node: {os.cpu_count()}"))) > 0
    assert tuned_for(read_loader_yaml(_best(tmp_path, "nproc_per_node: null"))) == 1


def test_an_unknown_key_in_a_file_is_shown_with_its_value(tmp_path: Path) -> None:
    path = _best(tmp_path, "num_workers: 0", "num_wrokers: 7")
    with pytest.raises(ConfigError, match=r"^loader\.num_wrokers=7: is not a known key"):
        build_dataloader(Squares(), path, device="cpu")
