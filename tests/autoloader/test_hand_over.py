"""Switching segments in one process (``autoloader/_tail.py``): the same setting next goes on
on its iterator, another setting's probe starts while the old one's batches in flight still
arrive, and a probe failing in that tail loses nothing and keeps the epoch's order. Real
DataLoader workers; no figure timed on this machine is asserted."""

from __future__ import annotations

import os
import signal
import time
from itertools import pairwise
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from loadertune import AutoLoader
from loadertune.autoloader._driver import Driver
from loadertune.autoloader._probe import Probe

W1 = {"num_workers": 1, "prefetch_factor": 2, "persistent_workers": True}
W2 = {"num_workers": 2, "prefetch_factor": 2, "persistent_workers": True}
BATCHES = 100  # per epoch: the tuning (60 steps) ends inside the first


class Reads(Dataset[int]):
    """Index i is sample i; in a worker each read waits ``read_s`` (batches in flight are
    still loading when a segment hands over)."""

    def __init__(self, n: int, read_s: float = 0.0) -> None:
        self.n, self.read_s = n, read_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if self.read_s and torch.utils.data.get_worker_info() is not None:
            time.sleep(self.read_s)
        return i


def batches(loader: Any, epochs: int, step_s: float = 0.0) -> list[list[int]]:
    """Every batch of ``epochs`` epochs; each step sleeps ``step_s`` (an accelerator's)."""
    out = []
    for _ in range(epochs):
        for b in loader:
            out.append(b.tolist())
            time.sleep(step_s)
    return out


def seeded() -> torch.Generator:
    return torch.Generator().manual_seed(7)


def tuned(ds: Dataset[int]) -> AutoLoader:
    """Two settings in three rounds (W1 W2, W2 W1, W1 W2): two adjacencies of one setting."""
    return AutoLoader(
        ds, batch_size=2, shuffle=True, generator=seeded(), tune_steps=60,
        candidates=[W1, W2], probe_timeout_s=10,
    )  # fmt: skip


def test_a_setting_next_again_goes_on_and_another_starts_while_the_tail_arrives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ds = Reads(2 * BATCHES, read_s=0.001)
    auto = tuned(ds)
    starts: list[tuple[str, int, bool]] = []  # setting, batches delivered, a tail in flight
    real_start = Probe.start

    def start(self: Probe, guarded: bool) -> None:
        d = auto._driver
        tail = d is not None and d.leaving is not None and d.leaving.outstanding > 0
        starts.append((self.setting.name, self.plan.num_delivered, tail))
        real_start(self, guarded)

    monkeypatch.setattr(Probe, "start", start)
    got = batches(auto, 1, step_s=0.005)  # both settings hide 2 ms loads: neither far behind
    assert got == batches(DataLoader(ds, batch_size=2, shuffle=True, generator=seeded()), 1)

    order = [m.setting.name for m in auto._tuner.measures]
    assert order == ["w1", "w2", "w2", "w1", "w1", "w2"]  # rotated rounds
    changes = 1 + sum(a != b for a, b in pairwise(order))
    chosen = auto.settings["num_workers"]
    settle_restart = int(f"w{chosen}" != order[-1])  # the chosen setting was not the last
    assert len(starts) == changes + settle_restart  # none where the same setting went on
    assert all(tail for _, _, tail in starts[1:]), starts  # each began loading during a tail


@pytest.mark.parametrize("tail", ["drained", "fed"])
def test_a_probe_failing_in_its_tail_is_dropped_and_loses_nothing(
    monkeypatch: pytest.MonkeyPatch, tail: str
) -> None:
    """Its workers are killed as its segment hands over, with batches in flight still
    loading: a drained tail (another setting next) or a fed one (the same setting next)."""
    ds = Reads(2 * BATCHES, read_s=0.005)
    auto = tuned(ds)
    killed: list[str] = []
    real = Driver._hand_over

    def hand_over(self: Driver) -> None:
        real(self)
        t = self.leaving
        if t is None or killed or t.drained != (tail == "drained"):
            return
        killed.append(t.probe.setting.name)
        for pid in t.probe.worker_pids():
            os.kill(pid, signal.SIGKILL)

    monkeypatch.setattr(Driver, "_hand_over", hand_over)
    got = batches(auto, 2)
    plain = DataLoader(ds, batch_size=2, shuffle=True, generator=seeded())
    assert got == batches(plain, 2)  # every batch once, in the epoch's order
    assert killed, "no tail of that kind was handed over"
    dropped = {s.name: why for s, why in auto._tuner.dropped.items()}
    assert killed[0] in dropped and "exited" in dropped[killed[0]]
    assert auto.settings["num_workers"] != int(killed[0][1:])
