"""AutoLoader in a plain training loop: every index exactly once, through switches, faults,
epochs and a resume from ``state_dict()``. No test asserts a figure timed on this machine."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from loadertune import AutoLoader

W1 = {"num_workers": 1, "prefetch_factor": 2, "persistent_workers": True}
W2 = {"num_workers": 2, "prefetch_factor": 2, "persistent_workers": True}
W0 = {"num_workers": 0}


class Numbers(Dataset[int]):
    """Index i is sample i; ``crash_at`` workers: a worker of a loader with that many dies."""

    def __init__(self, n: int, crash_at: int = -1, hang_at: int = -1) -> None:
        self.n, self.crash_at, self.hang_at = n, crash_at, hang_at

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers == self.crash_at:
            os._exit(3)
        if info is not None and info.num_workers == self.hang_at:
            time.sleep(3.5)
        return i


def epochs(loader: Any, count: int, stop_after: int | None = None) -> list[list[list[int]]]:
    """The batches of ``count`` epochs, as index lists."""
    out = []
    for _ in range(count):
        batches = []
        for batch in loader:
            batches.append(batch.tolist())
            if stop_after is not None and len(batches) == stop_after:
                break
        out.append(batches)
    return out


def flat(batches: list[list[int]]) -> list[int]:
    return [i for b in batches for i in b]


def seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_same_batches_as_a_seeded_dataloader_through_switches() -> None:
    """Probes switch mid-epoch, yet the batches are the ones DataLoader yields, in order."""
    ds = Numbers(50)
    plain = DataLoader(ds, batch_size=4, shuffle=True, generator=seeded())
    auto = AutoLoader(
        ds, batch_size=4, shuffle=True, generator=seeded(), tune_steps=48,
        candidates=[W0, W1], probe_timeout_s=5,
    )  # fmt: skip
    assert len(auto) == len(plain) == 13
    assert epochs(auto, 4) == epochs(plain, 4)
    assert auto.decision is not None
    assert auto.settings["num_workers"] in (0, 1)


def test_drop_last_and_shuffle_each_index_once_per_epoch() -> None:
    ds = Numbers(43)
    auto = AutoLoader(
        ds, batch_size=5, shuffle=True, drop_last=True, tune_steps=48,
        candidates=[W1, W0], probe_timeout_s=5,
    )  # fmt: skip
    assert len(auto) == 8
    for batches in epochs(auto, 6):
        seen = flat(batches)
        assert len(batches) == 8 and len(seen) == len(set(seen)) == 40
    perms = [flat(b) for b in epochs(auto, 2)]
    assert perms[0] != perms[1]  # one new permutation per epoch


def test_crashing_probe_is_dropped_and_nothing_lost() -> None:
    """The 2-worker probe's workers die: training goes on, every index exactly once."""
    ds = Numbers(64, crash_at=2)
    auto = AutoLoader(  # the limit leaves a 1-worker probe's start-up room on a busy machine
        ds, batch_size=2, tune_steps=48, candidates=[W1, W2], probe_timeout_s=8,
    )  # fmt: skip
    for batches in epochs(auto, 3):
        assert sorted(flat(batches)) == list(range(64))
        assert flat(batches) == list(range(64))  # in order: re-queued batches come first
    assert auto.settings["num_workers"] == 1
    assert "dropped" in auto.report()


def test_hung_probe_is_dropped() -> None:
    ds = Numbers(48, hang_at=2)
    auto = AutoLoader(  # short: a longer limit lets the race drop the hung probe first
        ds, batch_size=2, tune_steps=48, candidates=[W1, W2], probe_timeout_s=2.5,
    )  # fmt: skip
    for batches in epochs(auto, 2):
        assert flat(batches) == list(range(48))
    assert auto.settings["num_workers"] == 1
    assert "hung" in auto.report()


def test_probe_over_memory_limit_is_dropped() -> None:
    """A limit below what the training process holds drops every probe with workers."""
    auto = AutoLoader(
        Numbers(40), batch_size=2, tune_steps=48, candidates=[W0, W1], memory_limit_mb=1.0,
    )  # fmt: skip
    for batches in epochs(auto, 2):
        assert flat(batches) == list(range(40))
    assert auto.settings["num_workers"] == 0
    assert "memory" in auto.report()


def _resume_case(stop_at: int, tune_steps: int) -> None:
    """Stop mid-epoch 1 at ``stop_at``, checkpoint through torch.save, resume in a new loader:
    the rest of the run is batch for batch the uninterrupted run's."""
    ds = Numbers(40)

    def make() -> AutoLoader:
        return AutoLoader(
            ds, batch_size=4, shuffle=True, generator=seeded(7), tune_steps=tune_steps,
            candidates=[W0, W1], probe_timeout_s=5,
        )  # fmt: skip

    whole = epochs(make(), 3)
    first = make()
    before = epochs(first, 1)
    before += epochs(first, 1, stop_after=stop_at)
    path = "/dev/shm" if os.path.isdir("/dev/shm") else "."
    ckpt = os.path.join(path, f"autoloader_state_{os.getpid()}.pt")
    torch.save(first.state_dict(), ckpt)
    state = torch.load(ckpt)
    os.remove(ckpt)
    second = make()
    second.load_state_dict(state)
    after = epochs(second, 2)
    assert before[0] == whole[0]
    assert before[1] + after[0] == whole[1]
    assert after[1] == whole[2]
    return None


def test_resume_after_tuning_neither_tunes_nor_repeats() -> None:
    _resume_case(stop_at=4, tune_steps=48)


def test_resume_mid_tuning_finishes_tuning_exactly_once() -> None:
    ds = Numbers(40)
    first = AutoLoader(ds, batch_size=2, tune_steps=48, candidates=[W0, W1], probe_timeout_s=5)
    head = epochs(first, 1, stop_after=11)[0]
    state = first.state_dict()
    second = AutoLoader(ds, batch_size=2, tune_steps=48, candidates=[W0, W1])
    second.load_state_dict(state)
    rest = epochs(second, 3)
    assert head + rest[0] == [[i, i + 1] for i in range(0, 40, 2)]
    assert all(flat(b) == list(range(40)) for b in rest[1:])
    assert second.decision is not None


def test_resume_settled_loader_keeps_settings_without_probing() -> None:
    ds = Numbers(40)
    first = AutoLoader(ds, batch_size=4, tune_steps=48, candidates=[W0, W1], probe_timeout_s=5)
    epochs(first, 6)
    state = first.state_dict()
    second = AutoLoader(ds, batch_size=4, tune_steps=48, candidates=[W0, W1])
    second.load_state_dict(state)
    assert second.settings == first.settings
    assert flat(epochs(second, 1)[0]) == list(range(40))
    assert len(second._tuner.measures) == len(first._tuner.measures)  # no new probe


def test_skip_batches_starts_the_next_epoch_after_its_first_batches_through_switches() -> None:
    """A framework's resume (Trainer's count of trained batches): the next epoch, drawn as
    always, starts at its fourth batch while the probes switch; the epoch after is whole."""

    def make() -> AutoLoader:
        return AutoLoader(
            Numbers(40), batch_size=4, shuffle=True, generator=seeded(3), tune_steps=8,
            candidates=[W0, W1], probe_timeout_s=5,
        )  # fmt: skip

    whole = epochs(make(), 2)
    resumed = make()
    resumed.skip_batches(3)
    after = epochs(resumed, 2)
    assert after[0] == whole[0][3:]
    assert after[1] == whole[1]
    assert resumed.state_dict()["_num_yielded"] == 10
    with pytest.raises(ValueError, match="a count of batches"):
        resumed.skip_batches(-1)


def test_resume_with_another_order_is_refused() -> None:
    ds = Numbers(40)
    first = AutoLoader(ds, batch_size=4, shuffle=True, generator=seeded(1), tune_steps=0)
    epochs(first, 1, stop_after=3)
    other = AutoLoader(Numbers(44), batch_size=4, shuffle=True, generator=seeded(1), tune_steps=0)
    with pytest.raises(ValueError, match="different order"):
        other.load_state_dict(first.state_dict())


def test_explicit_settings_stay_fixed() -> None:
    auto = AutoLoader(Numbers(40), batch_size=2, num_workers=1, tune_steps=48, probe_timeout_s=5)
    for batches in epochs(auto, 2):
        assert flat(batches) == list(range(40))
    assert auto.settings["num_workers"] == 1
    assert {m.setting.num_workers for m in auto._tuner.measures} == {1}


def test_no_tuning_is_a_plain_loader() -> None:
    auto = AutoLoader(Numbers(10), batch_size=3, tune_steps=0)
    assert epochs(auto, 1)[0] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert auto.settings["num_workers"] == 0 and auto._tuner.measures == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_pin_memory_is_probed_on_cuda() -> None:
    """On an accelerator, pinned and unpinned candidates are compared; batches still arrive
    exactly once and can be copied non-blocking."""
    auto = AutoLoader(Numbers(64), batch_size=2, tune_steps=60, device="cuda", probe_timeout_s=10)
    seen = []
    for batch in auto:
        seen += batch.to("cuda", non_blocking=True).tolist()
    assert seen == list(range(64))
    assert {m.setting.pin_memory for m in auto._tuner.measures} >= {True}
    assert isinstance(auto.settings["pin_memory"], bool)


def test_an_abandoned_epoch_starts_the_next_afresh() -> None:
    """Breaking out of an epoch (as with a plain DataLoader) starts a new, whole epoch."""
    auto = AutoLoader(Numbers(40), batch_size=2, tune_steps=48, candidates=[W1, W0])
    assert len(epochs(auto, 1, stop_after=5)[0]) == 5
    for batches in epochs(auto, 3):
        assert flat(batches) == list(range(40))


def _as_dict(batch: list[int]) -> dict[str, torch.Tensor]:
    return {"x": torch.tensor(batch)}


def test_collate_fn_and_batch_sampler_pass_through() -> None:
    """The user's collate_fn and batch_sampler are a DataLoader's, through the probes."""
    from torch.utils.data import BatchSampler, SequentialSampler

    ds = Numbers(30)
    sampler = BatchSampler(SequentialSampler(ds), batch_size=4, drop_last=False)
    auto = AutoLoader(
        ds, batch_sampler=sampler, collate_fn=_as_dict, tune_steps=48, candidates=[W0, W1],
    )  # fmt: skip
    plain = DataLoader(ds, batch_sampler=sampler, collate_fn=_as_dict)
    for _ in range(6):
        got = [b["x"].tolist() for b in auto]
        assert got == [b["x"].tolist() for b in plain]
    assert (auto.settings["batch_size"], auto.settings["drop_last"]) == (4, False)


class Busy(Dataset[int]):
    """Each sample costs 2 ms of CPU work in whichever process loads it."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> int:
        end = time.process_time() + 0.002
        while time.process_time() < end:
            pass
        return i


@pytest.mark.skipif(not os.path.exists("/proc/self/schedstat"), reason="Linux run-queue figures")
def test_workers_queued_for_a_cpu_are_counted() -> None:
    """Two busy workers on one CPU queue for it: every compared segment of the 2-worker
    probe says so (``queued_s``), and the label's evidence carries it as the sweep's does."""
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})  # the workers fork with it
    try:
        auto = AutoLoader(Busy(), batch_size=4, tune_steps=48, candidates=[W1, W2])
        assert len(flat(epochs(auto, 3)[0])) == 64
        auto.close()
    finally:
        os.sched_setaffinity(0, cpus)
    two = [m for m in auto._tuner.measures if m.setting.num_workers == 2 and m.round >= 0]
    assert two and all(m.queued_s is not None and m.queued_s > 0 for m in two)
    assert auto.decision is not None and "cpu_wait_procs" in auto.decision.evidence


def test_the_report_says_only_what_was_measured() -> None:
    """Nothing compared: the report says so, never "fastest measured"; compared: the chosen
    row says chosen, and no row says both chosen and out of the race."""
    untuned = AutoLoader(Numbers(40), batch_size=4, tune_steps=8, candidates=[W0, W1])
    epochs(untuned, 1)
    text = untuned.report()
    assert "fastest measured" not in text
    assert "no two settings were compared" in text
    tuned = AutoLoader(Numbers(40), batch_size=2, tune_steps=60, candidates=[W0, W1])
    epochs(tuned, 3)
    rows = [line for line in tuned.report().splitlines() if line.startswith("w")]
    chosen = [r for r in rows if r.endswith("chosen")]
    assert len(chosen) == 1 and chosen[0].startswith(tuned.decision.chosen.name + " ")
