"""AutoLoader's faults met for real: a probe's worker killed while its batch is in transfer,
an export path that cannot be written, a tracking server dead or dying.

A batch whose worker dies while the training process unpickles it fails inside the transfer
(``ConnectionResetError``/``EOFError`` from ``resource_sharer``), not with PyTorch's
``RuntimeError``; the probe is dropped all the same and every index arrives exactly once.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset

from loadertune import AutoLoader
from loadertune.errors import ConfigError
from tests._mlflow_server import free_port, mlflow_server_process

W1 = {"num_workers": 1, "prefetch_factor": 2, "persistent_workers": True}
W2 = {"num_workers": 2, "prefetch_factor": 4, "persistent_workers": True}
W0 = {"num_workers": 0}


class Tensors(Dataset[torch.Tensor]):
    """Sample i is a tensor of i (its storage goes through the worker's socket); a worker of
    the 2-worker probe SIGKILLs itself ``delay_s`` after loading ``kill_at``, as its batch
    is sent, and loads nothing more."""

    def __init__(self, n: int, kill_at: int, delay_s: float) -> None:
        self.n, self.kill_at, self.delay_s = n, kill_at, delay_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers == 2 and i == self.kill_at:
            kill = threading.Timer(self.delay_s, os.kill, (os.getpid(), signal.SIGKILL))
            kill.start()
            self.dying = True
        elif getattr(self, "dying", False):
            # The dying worker's later samples wait for the kill, so it lands within the
            # probe's segment (its later batches are due there), not after the tuning ends.
            time.sleep(5.0)
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


def test_an_idle_pool_whose_worker_died_is_refused_before_its_next_round() -> None:
    """A persistent worker killed while its probe waits for its next round: the probe fails
    when asked to start again (PyTorch alone would wait 5 s for the dead worker's answer)."""
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

    from loadertune.autoloader._plan import IndexPlan
    from loadertune.autoloader._probe import Probe, ProbeFault
    from loadertune.autoloader._schedule import Setting

    ds = Tensors(8, kill_at=-1, delay_s=0.0)
    plan = IndexPlan(BatchSampler(SequentialSampler(range(8)), 2, drop_last=False), None)
    plan.begin_epoch()

    def build(setting: Setting, sampler: Any, timeout_s: float) -> DataLoader[Any]:
        return DataLoader(ds, batch_sampler=sampler, num_workers=1, persistent_workers=True)

    probe = Probe(ds, Setting(num_workers=1, persistent_workers=True), plan, build, 5.0)
    try:
        probe.start(guarded=True)
        probe.next()
        probe.drain()
        with pytest.raises(StopIteration):
            while True:
                probe.next()
        probe.end_epoch()
        assert probe.lost_workers() == ""  # idle, alive: ready for another round
        (pid,) = probe.worker_pids()
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while probe.worker_pids() and time.monotonic() < deadline:
            time.sleep(0.02)
        lost = f"worker(s) [{pid}] exited (exit code [-9]) while idle between rounds"
        assert probe.lost_workers() == lost
        with pytest.raises(ProbeFault, match="while idle between rounds"):
            probe.start(guarded=True)
    finally:
        probe.close(kill=True)


class FailingRead(Dataset[int]):
    """The dataset's own ``FileNotFoundError`` (a missing file): the user's bug, not a probe's."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> int:
        if i == 9:
            raise FileNotFoundError("/no/such/sample")
        return i


def test_the_datasets_own_oserror_is_raised_not_taken_for_a_crash() -> None:
    auto = AutoLoader(FailingRead(), batch_size=2, tune_steps=8, candidates=[W1], probe_timeout_s=5)
    with pytest.raises(FileNotFoundError, match="no/such/sample"):
        for _ in auto:
            pass
    auto.close()


class Numbers(Dataset[int]):
    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int) -> int:
        return i


def _each_once(auto: AutoLoader) -> None:
    assert sorted(int(x) for batch in auto for x in batch) == list(range(40))


def test_an_export_that_cannot_be_written_is_refused_when_built(tmp_path: Path) -> None:
    """A folder, or a path through a file: refused before training, naming ``export``."""
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    for bad in (tmp_path, blocker / "sub" / "best_loader.yaml"):
        with pytest.raises(ConfigError, match=r"^export=.*Fix: "):
            AutoLoader(Numbers(), batch_size=4, tune_steps=8, candidates=[W0], export=bad)


def test_an_export_failing_at_settling_warns_and_training_goes_on(tmp_path: Path) -> None:
    out = tmp_path / "gone" / "best_loader.yaml"
    auto = AutoLoader(
        Numbers(), batch_size=4, tune_steps=6, candidates=[W0], export=out, track=False
    )
    shutil.rmtree(out.parent)
    out.parent.write_text("the folder became a file")  # the write at settling fails for real
    with pytest.warns(RuntimeWarning, match="could not export") as caught:
        _each_once(auto)
    assert caught[0].filename == __file__  # the user's loop, not loadertune's insides
    assert auto.decision is not None and out.parent.is_file()


def test_a_dead_tracking_server_is_warned_of_when_built_and_not_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing listens on the port: one warning at the user's call, then plain training."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    with pytest.warns(RuntimeWarning, match="will not record to MLflow.*does not answer") as w:
        auto = AutoLoader(Numbers(), batch_size=4, tune_steps=6, candidates=[W0])
    assert w[0].filename == __file__
    assert auto.track is False
    _each_once(auto)
    assert auto.decision is not None and auto.run_id is None
    assert time.monotonic() - started < 120  # MLflow's own retries took about 248 s


def test_a_tracking_server_dying_before_settling_only_warns(tmp_path: Path) -> None:
    """The server answered when the AutoLoader was built, then was killed: the record fails
    within MLflow's bounded retries, with a warning at the user's loop."""
    with mlflow_server_process(
        f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "artifacts", tmp_path
    ) as server:
        auto = AutoLoader(
            Numbers(), batch_size=4, tune_steps=6, candidates=[W0], track=True,
        )  # fmt: skip
        assert auto.track is True
        server.kill()
        os.environ["MLFLOW_TRACKING_URI"] = server.uri
        started = time.monotonic()
        try:
            with pytest.warns(RuntimeWarning, match="could not record to MLflow") as caught:
                _each_once(auto)
        finally:
            del os.environ["MLFLOW_TRACKING_URI"]
    assert caught[0].filename == __file__
    assert auto.decision is not None and auto.run_id is None
    assert time.monotonic() - started < 120  # MLflow's default retries: about 4 minutes
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ  # the user's env as it was


def test_a_new_iterator_releases_the_one_left_mid_epoch() -> None:
    """As a framework that stops after len(loader) batches, or leaves an epoch early: the
    next iter() starts a whole new epoch, and the old iterator is released (it ends)."""
    auto = AutoLoader(Numbers(), batch_size=4, tune_steps=4, candidates=[W0])
    first = iter(auto)
    got = [int(x) for x in next(first)]
    assert got == [0, 1, 2, 3]
    second = iter(auto)
    assert list(first) == []  # released: nothing more from it
    assert sorted(int(x) for batch in second for x in batch) == list(range(40))
    for _ in range(2):  # a loop left early lets the next one start
        for _batch in auto:
            break
    taken = iter(auto)
    whole = [int(x) for _ in range(len(auto)) for x in next(taken)]  # never asked for more
    assert sorted(whole) == list(range(40))
    assert sorted(int(x) for batch in auto for x in batch) == list(range(40))


class EpochOrdered:
    """A sampler ordered by ``set_epoch`` that keeps its epoch where AutoLoader cannot see it."""

    def __init__(self, n: int) -> None:
        self.n, self._e = n, 0

    def set_epoch(self, epoch: int) -> None:
        self._e = epoch

    def __iter__(self) -> Any:
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(self._e))
        return iter(order.tolist())

    def __len__(self) -> int:
        return self.n


def test_resume_with_an_epoch_ordered_sampler_explains_set_epoch() -> None:
    def make() -> AutoLoader:
        return AutoLoader(Numbers(), batch_size=4, sampler=EpochOrdered(40), tune_steps=0)

    auto = make()
    auto.sampler.set_epoch(3)
    it = iter(auto)
    seen = [int(x) for _ in range(3) for x in next(it)]
    state = auto.state_dict()
    del it
    fresh = make()
    fix = r"Fix: call loader\.sampler\.set_epoch\(<the epoch the checkpoint was written in>\)"
    with pytest.raises(ValueError, match=rf"set_epoch\(epoch\).*{fix} before load_state_dict"):
        fresh.load_state_dict(state)
    fresh = make()
    fresh.sampler.set_epoch(3)
    fresh.load_state_dict(state)
    rest = [int(x) for batch in fresh for x in batch]
    assert sorted(seen + rest) == list(range(40))
