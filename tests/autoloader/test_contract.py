"""PyTorch's own DataLoader contract, one table run over ``DataLoader`` and ``AutoLoader``.

The cases are adapted from PyTorch's ``test/test_dataloader.py`` (``test_sequential_batch``,
``test_shuffle``, ``test_len``, ``test_invalid_assign_after_init``, ``test_error``,
``test_timeout``, ``test_worker_seed``, ``test_worker_init_fn``, ...) and from what
frameworks rely on (a new ``iter()`` after ``len(loader)`` batches, temporaries, the public
attributes). Each case takes a ``make(dataset, **kwargs)`` that builds the loader under test:
a ``DataLoader`` with the given arguments, or an ``AutoLoader`` that tunes whatever is not
given, switching probes inside the first epoch. A case asserts what a ``DataLoader`` does;
both must pass. No case asserts a figure timed on this machine.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    SequentialSampler,
    SubsetRandomSampler,
    get_worker_info,
)

from loadertune import AutoLoader

Make = Callable[..., Any]
W1 = {"num_workers": 1, "prefetch_factor": 2, "persistent_workers": True}
W2 = {"num_workers": 2, "prefetch_factor": 2, "persistent_workers": False}
W0 = {"num_workers": 0}


class Numbers(Dataset[int]):
    """Sample i is i."""

    def __init__(self, n: int = 40) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


class FailsAt(Numbers):
    """Sample ``bad`` raises ValueError, in whichever process loads it."""

    def __init__(self, bad: int, n: int = 40) -> None:
        super().__init__(n)
        self.bad = bad

    def __getitem__(self, i: int) -> int:
        if i == self.bad:
            raise ValueError(f"sample {i} is broken")
        return i


class Slow(Numbers):
    """Sample 30 takes 3 s in a worker (a timeout is a worker's: DataLoader has none without)."""

    def __getitem__(self, i: int) -> int:
        if i == 30 and get_worker_info() is not None:
            time.sleep(3.0)
        return i


class Draws(Numbers):
    """Each sample is three random draws in the loading process (torch, numpy, random), as
    a random augmentation makes them."""

    def __getitem__(self, i: int) -> Any:
        return torch.tensor([
            int(torch.randint(0, 2**62, ())),
            int(np.random.randint(0, 2**62)),
            random.getrandbits(62),
        ])  # fmt: skip


def plain(dataset: Any, **kwargs: Any) -> DataLoader[Any]:
    return DataLoader(dataset, **kwargs)


def auto(dataset: Any, **kwargs: Any) -> AutoLoader:
    """An AutoLoader comparing 0 and 1 worker (or what the case asks) over 40 steps: its
    epochs switch probes."""
    kwargs.setdefault("candidates", [W0, W1])
    return AutoLoader(dataset, tune_steps=40, probe_timeout_s=20, **kwargs)


def flat(batches: Any) -> list[int]:
    return [int(i) for b in batches for i in b]


# ------------------------------------------------------------------------------ the cases


def sequential_batches(make: Make) -> None:
    loader = make(Numbers(10), batch_size=4)
    assert [b.tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def shuffle_covers_every_index_and_reshuffles(make: Make) -> None:
    loader = make(Numbers(), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(1))
    first, second = flat(loader), flat(loader)
    assert sorted(first) == sorted(second) == list(range(40))
    assert first != second


def seeded_order_is_reproducible(make: Make) -> None:
    def order() -> list[int]:
        gen = torch.Generator().manual_seed(7)
        return flat(make(Numbers(), batch_size=4, shuffle=True, generator=gen))

    assert order() == order()


def length_and_drop_last(make: Make) -> None:
    assert len(make(Numbers(10), batch_size=4)) == 3
    loader = make(Numbers(10), batch_size=4, drop_last=True)
    assert len(loader) == 2
    assert flat(loader) == list(range(8))


def sampler_order_is_kept(make: Make) -> None:
    sampler = SubsetRandomSampler([7, 3, 9, 1], generator=torch.Generator().manual_seed(0))
    expected = list(sampler)
    sampler.generator = torch.Generator().manual_seed(0)
    assert flat(make(Numbers(), batch_size=3, sampler=sampler)) == expected


def batch_sampler_batches_are_kept(make: Make) -> None:
    batches = BatchSampler(SequentialSampler(range(10)), batch_size=3, drop_last=False)
    got = [b.tolist() for b in make(Numbers(10), batch_sampler=batches)]
    assert got == [list(b) for b in batches]


def collate_and_worker_init_fn_are_used(make: Make) -> None:
    loader = make(Numbers(12), batch_size=4, collate_fn=_as_dict, worker_init_fn=_worker_init)
    for _ in range(2):
        assert [i for b in loader for i in b["x"]] == list(range(12))


def _as_dict(batch: list[int]) -> dict[str, list[int]]:
    return {"x": list(batch)}


def _worker_init(worker_id: int) -> None:
    info = get_worker_info()
    assert info is not None and info.id == worker_id


def nested_batches_collate(make: Make) -> None:
    loader = make(Pairs(), batch_size=3)
    batch = next(iter(loader))
    assert batch["i"].tolist() == [0, 1, 2] and batch["pair"][1].tolist() == [0, -1, -2]


class Pairs(Numbers):
    def __getitem__(self, i: int) -> Any:
        return {"i": i, "pair": (torch.tensor(i), -i)}


def invalid_arguments_are_refused_when_built(make: Make) -> None:
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"num_workers": -1}, ValueError, "num_workers option should be non-negative"),
        ({"timeout": -1}, ValueError, "timeout option should be non-negative"),
        ({"num_workers": 0, "prefetch_factor": 2}, ValueError, "prefetch_factor option"),
        ({"num_workers": 0, "persistent_workers": True}, ValueError, "needs num_workers > 0"),
        ({"multiprocessing_context": "nonsense"}, ValueError, "nonsense"),
        ({"multiprocessing_context": 3}, TypeError, "multiprocessing_context"),
        ({"shuffle": True, "sampler": [0, 1]}, ValueError, "mutually exclusive with shuffle"),
        ({"batch_sampler": [[0]], "batch_size": 2}, ValueError, "batch_sampler option is"),
    ]
    for kwargs, error, text in cases:
        if kwargs.get("multiprocessing_context") is not None and make is plain:
            kwargs = {**kwargs, "num_workers": 1}  # DataLoader checks a context with workers
        with pytest.raises(error, match=text):
            make(Numbers(), **kwargs)


def attributes_are_refused_after_init(make: Make) -> None:
    loader = make(Numbers(), batch_size=8)
    for name, value in [("batch_size", 16), ("batch_sampler", None), ("sampler", None),
                        ("drop_last", True), ("dataset", Numbers(3)),
                        ("persistent_workers", True)]:  # fmt: skip
        with pytest.raises(ValueError, match=f"{name} attribute should not be set after"):
            setattr(loader, name, value)
    assert [len(b) for b in loader] == [8] * 5


def public_attributes_are_a_dataloaders(make: Make) -> None:
    loader = make(Numbers(), batch_size=8, timeout=5, collate_fn=_as_dict)
    assert isinstance(loader, DataLoader)
    reference = DataLoader(Numbers(), batch_size=8, timeout=5, collate_fn=_as_dict)
    same = ("batch_size", "drop_last", "timeout", "collate_fn", "worker_init_fn", "generator",
            "pin_memory_device", "in_order", "multiprocessing_context")  # fmt: skip
    for name in same:
        assert getattr(loader, name) == getattr(reference, name), name
    assert type(loader.sampler) is type(reference.sampler)
    assert type(loader.batch_sampler) is type(reference.batch_sampler)
    for name in ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory"):
        assert hasattr(loader, name), name
    assert loader.num_workers >= 0 and isinstance(loader.pin_memory, bool)


def temporaries_iterate(make: Make) -> None:
    assert next(iter(make(Numbers(), batch_size=4))).tolist() == [0, 1, 2, 3]
    assert flat(b for b in make(Numbers(), batch_size=4)) == list(range(40))


def a_new_iterator_after_len_batches_is_the_next_epoch(make: Make) -> None:
    loader = make(Numbers(), batch_size=4, shuffle=True)
    for _ in range(3):
        it = iter(loader)
        got = [next(it) for _ in range(len(loader))]  # never asks for more, as Lightning
        assert sorted(flat(got)) == list(range(40))


def an_iterator_left_early_leaves_the_next_epoch_whole(make: Make) -> None:
    loader = make(Numbers(), batch_size=4)
    it = iter(loader)
    next(it), next(it)
    del it
    assert flat(loader) == list(range(40))


def the_iterator_has_a_length(make: Make) -> None:
    loader = make(Numbers(10), batch_size=4)
    assert len(iter(loader)) == 3


def an_error_in_one_batch_leaves_the_epoch_going(make: Make) -> None:
    loader = make(FailsAt(bad=13), batch_size=4, **_workers(make, W1))
    for _ in range(2):
        got, errors = [], 0
        it = iter(loader)
        while True:
            try:
                got += next(it).tolist()
            except ValueError as err:
                assert "sample 13 is broken" in str(err)
                errors += 1
            except StopIteration:
                break
        assert errors == 1
        assert got == [i for i in range(40) if not 12 <= i < 16]


def the_timeout_is_honoured(make: Make) -> None:
    loader = make(Slow(), batch_size=2, timeout=1, **_workers(make, W1, W2, only=True))
    with pytest.raises(RuntimeError, match=r"DataLoader timed out after 1 seconds"):
        flat(loader)


def worker_random_streams_never_repeat_in_an_epoch(make: Make) -> None:
    loader = make(Draws(64), batch_size=4, **_workers(make, W2, W1, settle=W2))
    for _ in range(2):
        draws = [tuple(row.tolist()) for b in loader for row in b]
        for column in range(3):
            values = [d[column] for d in draws]
            assert len(set(values)) == len(values), f"draw {column} repeated within an epoch"


def two_loaders_over_one_dataset_interleave(make: Make) -> None:
    ds = Numbers(20)
    a, b = make(ds, batch_size=5), make(ds, batch_size=5)
    got_a, got_b = [], []
    for x, y in zip(a, b, strict=True):
        got_a += x.tolist()
        got_b += y.tolist()
    assert got_a == got_b == list(range(20))


def _workers(make: Make, *settings: dict[str, Any], only: bool = False,
             settle: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """Arguments giving the case worker processes: the DataLoader the first setting fixed
    (or ``settle``'s); the AutoLoader these as candidates (with 0 workers too unless
    ``only``), so its probes switch inside the epoch."""
    if make is plain:
        return dict(settle or settings[0])
    return {"candidates": [*settings, *([] if only else [W0])]}


CASES = [
    sequential_batches,
    shuffle_covers_every_index_and_reshuffles,
    seeded_order_is_reproducible,
    length_and_drop_last,
    sampler_order_is_kept,
    batch_sampler_batches_are_kept,
    collate_and_worker_init_fn_are_used,
    nested_batches_collate,
    invalid_arguments_are_refused_when_built,
    attributes_are_refused_after_init,
    public_attributes_are_a_dataloaders,
    temporaries_iterate,
    a_new_iterator_after_len_batches_is_the_next_epoch,
    an_iterator_left_early_leaves_the_next_epoch_whole,
    the_iterator_has_a_length,
    an_error_in_one_batch_leaves_the_epoch_going,
    the_timeout_is_honoured,
    worker_random_streams_never_repeat_in_an_epoch,
    two_loaders_over_one_dataset_interleave,
]


@pytest.mark.parametrize("make", [plain, auto], ids=["DataLoader", "AutoLoader"])
@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_the_dataloader_contract(case: Callable[[Make], None], make: Make) -> None:
    case(make)


def test_a_tuned_attribute_set_after_init_names_the_fix() -> None:
    """DataLoader lets ``num_workers`` be set between epochs; AutoLoader tunes it, so it
    refuses in one line saying how to fix it instead of ignoring it."""
    loader = AutoLoader(Numbers(), batch_size=4, tune_steps=0)
    with pytest.raises(ValueError, match=r"num_workers attribute .* Fix: pass num_workers=4"):
        loader.num_workers = 4


def test_attributes_say_the_setting_in_force() -> None:
    """While a probe runs its attributes are its setting's; once settled, the choice's."""
    loader = AutoLoader(Numbers(), batch_size=4, tune_steps=40, candidates=[W0, W1])
    assert loader.num_workers == 0  # nothing runs before the first epoch: the default
    seen = set()
    for _ in range(5):
        for _batch in loader:
            running = loader._driver.probe.setting  # the probe that delivered the batch
            assert (loader.num_workers, loader.prefetch_factor) == (
                running.num_workers, running.prefetch_factor,
            )  # fmt: skip
            seen.add(loader.num_workers)
    assert seen == {0, 1}  # both candidates ran
    assert loader.decision is not None
    chosen = loader.decision.chosen
    assert loader.num_workers == loader.settings["num_workers"] == chosen.num_workers
    assert loader.persistent_workers is (chosen.num_workers > 0)
    fixed = AutoLoader(Numbers(), batch_size=4, num_workers=0, tune_steps=8)
    assert vars(fixed)["num_workers"] == 0  # what a re-creation from attributes passes
    assert "prefetch_factor" not in vars(fixed)  # tuned: left for the new one to tune
