"""Settings that cannot work, refused before any worker starts: a batch the dataset cannot fill,
batches beyond memory, more workers than the machine holds; the items sampled to size them."""

from __future__ import annotations

import pytest
import torch

from loadertune.checks import _preflight as preflight
from loadertune.config._typed import LoaderConfig
from loadertune.errors import ConfigError
from loadertune.record._failures import InfeasibleSetting


class Sized(torch.utils.data.Dataset[torch.Tensor]):
    """``length`` items; item ``i`` holds ``big`` floats when ``i`` is past the first."""

    def __init__(self, length: int, small: int = 4, big: int = 4) -> None:
        self.length, self.small, self.big = length, small, big

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.zeros(self.small if index == 0 else self.big)


@pytest.mark.parametrize(
    ("length", "expected"),
    [(0, []), (3, [0, 1, 2]), (8, list(range(8))), (100, [0, 14, 28, 42, 57, 71, 85, 99])],
)
def test_spread_indices(length: int, expected: list[int]) -> None:
    assert preflight.spread_indices(length) == expected


def test_the_largest_item_sizes_the_batch_not_the_first() -> None:
    _, largest = preflight.largest_item_bytes(Sized(1000, small=4, big=1000))
    assert largest == 4000


@pytest.mark.parametrize("drop_last", [True, False])
def test_a_batch_the_dataset_cannot_fill_is_refused(drop_last: bool) -> None:
    loader = LoaderConfig(batch_size=2048, drop_last=drop_last)
    with pytest.raises(ConfigError, match=r"loader.batch_size=2048.*512 items"):
        preflight.check(loader, Sized(512))


def test_batches_beyond_memory_are_refused_before_any_worker() -> None:
    loader = LoaderConfig(batch_size=10**8, num_workers=2)
    with pytest.raises(InfeasibleSetting, match=r"memory_budget.*lower loader\.batch_size"):
        preflight.check(loader, Sized(10**9, big=64))


def test_more_workers_than_the_machine_can_use_are_refused() -> None:
    cap = preflight.worker_cap().workers
    preflight.check_worker_count(LoaderConfig(num_workers=cap))
    with pytest.raises(ConfigError, match=f"loader.num_workers={cap + 1}"):
        preflight.check_worker_count(LoaderConfig(num_workers=cap + 1))
