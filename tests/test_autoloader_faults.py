"""AutoLoader's faults met for real: a probe's worker killed while its batch is in transfer.

A batch whose worker dies while the training process unpickles it fails inside the transfer
(``ConnectionResetError``/``EOFError`` from ``resource_sharer``), not with PyTorch's
``RuntimeError``; the probe is dropped all the same and every index arrives exactly once.
"""

from __future__ import annotations

import os
import random
import signal
import threading

import torch
from torch.utils.data import Dataset

from loadertune import AutoLoader

W1 = {"num_workers": 1, "prefetch_factor": 2, "persistent_workers": True}
W2 = {"num_workers": 2, "prefetch_factor": 4, "persistent_workers": True}


class Tensors(Dataset[torch.Tensor]):
    """Sample i is a tensor of i (its storage goes through the worker's socket); a worker of
    the 2-worker probe SIGKILLs itself ``delay_s`` after loading ``kill_at``, as its batch
    is sent."""

    def __init__(self, n: int, kill_at: int, delay_s: float) -> None:
        self.n, self.kill_at, self.delay_s = n, kill_at, delay_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers == 2 and i == self.kill_at:
            kill = threading.Timer(self.delay_s, os.kill, (os.getpid(), signal.SIGKILL))
            kill.start()
        return torch.full((256,), i, dtype=torch.int64)


def test_worker_killed_mid_transfer_drops_the_probe_every_time() -> None:
    """Five runs, each killing a probe's worker at another moment of its batch's transfer."""
    rng = random.Random(0)
    for _ in range(5):
        ds = Tensors(96, kill_at=30, delay_s=rng.uniform(0.0, 0.01))
        auto = AutoLoader(ds, batch_size=2, tune_steps=40, candidates=[W1, W2], probe_timeout_s=5)
        seen = [int(x) for batch in auto for x in batch[:, 0]]
        assert sorted(seen) == list(range(96))
        assert auto.settings["num_workers"] == 1
        assert "dropped" in auto.report()
        auto.close()


class FailingRead(Dataset[int]):
    """The dataset's own ``FileNotFoundError`` (a missing file): the user's bug, not a probe's."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> int:
        if i == 9:
            raise FileNotFoundError("/no/such/sample")
        return i


def test_the_datasets_own_oserror_is_raised_not_taken_for_a_crash() -> None:
    import pytest

    auto = AutoLoader(FailingRead(), batch_size=2, tune_steps=8, candidates=[W1], probe_timeout_s=5)
    with pytest.raises(FileNotFoundError, match="no/such/sample"):
        for _ in auto:
            pass
    auto.close()
