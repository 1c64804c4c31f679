"""Trials of several ranks (``trial.nproc_per_node``): real gloo ranks through torch's launcher."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import socket
from pathlib import Path

import psutil
import pytest
import torch

from loadertune import run_trial
from loadertune.config._typed import to_run_config
from loadertune.loader._rank_share import RankShare
from loadertune.measure._timing import StepRecord, summarize
from loadertune.ranks import launch
from loadertune.ranks.board import Board, hung_rank
from loadertune.ranks.node import node_summary
from loadertune.record._failures import TrialFailure
from tests.conftest import Compose

TWO = ["++trial.nproc_per_node=2"]
SHM = Path("/dev/shm")


_EARLIER: set[int] = set()


@pytest.fixture(autouse=True)
def _earlier_children() -> None:
    """Note this process's descendants before each test (an earlier module's server in this
    test worker): the trial's clean-up leaves them alone, and so does the check after it."""
    _EARLIER.clear()
    _EARLIER.update(p.pid for p in psutil.Process().children(recursive=True))


def _running_children() -> list[psutil.Process]:
    """This process's descendants the test started that still run (a zombie has ended: it
    holds no CPU, memory or lock, only a pid until its parent reaps it)."""
    running = []
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if proc.pid not in _EARLIER and proc.status() != psutil.STATUS_ZOMBIE:
                running.append(proc)
    return running


def _records(step_s: float, steps: int, samples: int, wait_s: float = 0.0) -> list[StepRecord]:
    return [
        StepRecord(i, i * step_s, wait_s, 0.0, step_s - wait_s, (i + 1) * step_s, samples)
        for i in range(steps)
    ]


def test_node_rate_is_all_samples_over_the_slowest_window() -> None:
    fast = summarize(_records(0.010, 10, 4), 0)  # 40 samples in 0.10 s
    slow = summarize(_records(0.012, 10, 4, wait_s=0.006), 0)  # 40 samples in 0.12 s
    node = node_summary([fast, slow])
    assert node.samples == 80
    assert node.window_s == pytest.approx(0.12)
    assert node.time_per_sample_ms == pytest.approx(0.12 * 1000 / 80)
    assert node.samples_per_s == pytest.approx(80 / 0.12)
    assert node.data_wait_fraction == pytest.approx(0.5)  # the slowest rank's


def test_the_oldest_beat_is_the_hung_rank() -> None:
    assert hung_rank([0.0, 0.0], now=100.0, limit_s=5.0) is None  # nobody started yet
    assert hung_rank([98.0, 99.0], now=100.0, limit_s=5.0) is None  # progress lately
    assert hung_rank([90.0, 92.0], now=100.0, limit_s=5.0) == 0
    assert hung_rank([92.0, 0.0], now=100.0, limit_s=5.0) == 1  # never beat at all


def test_the_rank_not_waiting_in_a_collective_is_the_hung_one() -> None:
    """Starved ranks beat in any order: the one waiting for the others is not the cause."""
    assert hung_rank([90.0, 92.0], now=100.0, limit_s=5.0, waits=[True, False]) == 1
    assert hung_rank([90.0, 92.0, 91.0], 100.0, 5.0, waits=[True, False, False]) == 2
    assert hung_rank([90.0, 92.0], now=100.0, limit_s=5.0, waits=[True, True]) == 0
    assert hung_rank([98.0, 92.0], now=100.0, limit_s=5.0, waits=[False, True]) is None
    board = Board(multiprocessing.get_context("fork"), 2)
    board.waiting(0)
    board.beat(1)
    assert board.waits() == [True, False]
    board.beat(0)  # back from the collective, on its own work again
    assert board.waits() == [False, False]
    board.failed(1)
    first = board.failed_at(1)
    board.failed(1)  # the same error, passing an outer handler later
    assert board.failed_at(1) == first > 0.0 and board.failed_at(0) == 0.0


def test_rank_shares_are_disjoint_equal_and_cover_the_stream() -> None:
    stream = list(range(100, 130))
    shares = [list(RankShare(stream, r, 3)) for r in range(3)]
    assert [len(s) for s in shares] == [10, 10, 10]
    assert sorted(i for s in shares for i in s) == stream


def _leaked_shm(before: set[str]) -> list[str]:
    """``torch_*`` files made since ``before`` whose owner process is gone."""
    now = {p.name for p in SHM.glob("torch_*")} if SHM.is_dir() else set()
    owners = {n: n.split("_")[1] for n in now - before}
    return [n for n, pid in owners.items() if pid.isdigit() and not psutil.pid_exists(int(pid))]


def test_two_ranks_measure_the_node(compose: Compose, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    seen: list[tuple[int, bool]] = []
    groups: set[int] = set()

    def on_step(record: StepRecord, timed: bool) -> None:
        seen.append((record.samples, timed))
        for proc in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                groups.add(os.getpgid(proc.pid))

    config = to_run_config(compose([*TWO, "loader.num_workers=1", "trial.precision=null"]))
    result = run_trial(config, on_step=on_step)
    # Ranks, their workers and the sampler stay in the trial's process group: a sweep's kill
    # of that group takes them all.
    assert groups == {os.getpgrp()}
    assert [r.rank for r in result.ranks] == [0, 1]
    s = result.summary
    assert s.steps == 4
    assert s.samples == sum(r.samples for r in result.ranks) == 2 * 4 * 4
    slowest = max(r.window_s for r in result.ranks)
    assert s.time_per_sample_ms == pytest.approx(slowest * 1000 / s.samples)
    assert all(r.torch_threads == 1 for r in result.ranks)  # torchrun's default
    assert "OMP_NUM_THREADS" not in os.environ  # set for the ranks only
    metrics = result.metrics()
    for k in (0, 1):
        assert metrics[f"rank{k}.time_per_sample_ms"] == result.ranks[k].time_per_sample_ms
        assert 0.0 <= metrics[f"rank{k}.data_wait_fraction"] <= 1.0
    # The node's steps reach on_step from rank 0: each step holds both ranks' samples.
    assert [t for _, t in seen].count(True) == 4
    assert all(n == 8 for n, _ in seen)
    assert [r.samples for r in result.steps] == [8, 8, 8, 8]
    assert [r["rank"] for r in result.to_dict()["ranks"]] == [0, 1]
    # The whole tree is the trial's: the trial process and both ranks (and workers) sampled.
    assert max(r.processes for r in result.resources) >= 3
    assert not _running_children()


@pytest.mark.parametrize(
    ("mode", "reason", "words"),
    [
        (
            "raise",
            "step_error",
            "rank 1 of 2 raised StepError: [step_error] the training step "
            "(model._target_=rank_faults.failing_step) raised ValueError at ",
        ),
        ("exit", "rank_failed", "rank 1 of 2 exited with status 7"),
        ("kill", "rank_failed", "rank 1 of 2 was killed by SIGKILL"),
        ("hang", "timeout", "rank 1 of 2 made no progress"),
    ],
)
def test_a_failing_rank_fails_the_trial_naming_it(
    compose: Compose, fixtures_on_path: Path, mode: str, reason: str, words: str
) -> None:
    before = {p.name for p in SHM.glob("torch_*")} if SHM.is_dir() else set()
    config = to_run_config(
        compose(
            [
                *TWO,
                "model=custom",
                "model._target_=rank_faults.failing_step",
                f"+model.mode={mode}",
                "loader.num_workers=1",
                "trial.time_limit_s=1",
            ]
        )
    )
    with pytest.raises(TrialFailure) as caught:
        run_trial(config)
    assert caught.value.reason == reason, caught.value.message
    assert words in caught.value.message
    assert not _running_children()  # no rank, worker or sampler left
    assert not _leaked_shm(before)


def test_a_taken_rendezvous_port_is_retried_on_another(
    compose: Compose, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    ports = [taken.getsockname()[1]]
    real = launch.free_port

    def first_taken() -> int:
        ports.append(real())
        return ports[0] if len(ports) == 2 else ports[-1]

    monkeypatch.setattr(launch, "free_port", first_taken)
    with taken:
        result = run_trial(to_run_config(compose([*TWO, "model=simulated", "model.step_ms=2"])))
    assert len(result.ranks) == 2
    assert len(ports) == 3  # the taken one, then a free one


def test_the_diagnosis_names_the_slowest_rank_and_what_held_it() -> None:
    from loadertune.measure._diagnosis import slowest_rank
    from loadertune.record._result import RankFigures

    fast = RankFigures(0, 10.0, 0.05, 0.1, 9.0, 0.50, 48, 0.4, 1)
    starved = RankFigures(1, 11.0, 0.60, 0.1, 4.0, 0.53, 48, 0.4, 1)
    sentence, evidence = slowest_rank([fast, starved])
    assert evidence == {"slowest_rank": 1, "slowest_rank_held_by": "waiting for data"}
    assert "rank 1" in sentence and "waiting for data 60%" in sentence
    copying = RankFigures(1, 11.0, 0.10, 8.0, 1.0, 0.53, 48, 0.4, 1)
    assert slowest_rank([fast, copying])[1]["slowest_rank_held_by"] == "copying batches"


def test_build_dataloader_shards_only_when_asked(tmp_path: Path) -> None:
    """As a DataLoader: the caller's sampler, none added (a framework shards it next);
    ``shard=True`` gives this rank its DistributedSampler share, explicitly."""
    import warnings

    import torch.distributed as dist
    from torch.utils.data import DistributedSampler

    from loadertune import ConfigError, build_dataloader

    data = list(range(10))
    with pytest.raises(ConfigError, match=r"^shard=true: needs an initialised"):
        build_dataloader(data, {"batch_size": 2}, "cpu", shard=True)
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # tuned for this world: nothing to say
            plain = build_dataloader(data, {"batch_size": 2, "shuffle": False}, "cpu")
            loader = build_dataloader(data, {"batch_size": 2, "shuffle": False}, "cpu", shard=True)
        assert not isinstance(plain.sampler, DistributedSampler)
        assert isinstance(loader.sampler, DistributedSampler)
        assert [int(i) for b in loader for i in b] == data
        with pytest.warns(UserWarning, match=r"tuned for 2 rank\(s\) per node .* run on 1"):
            build_dataloader(data, {"batch_size": 2, "nproc_per_node": 2}, "cpu")
        given = build_dataloader(data, {"batch_size": 2}, "cpu", sampler=[0, 1])
        assert list(given.sampler) == [0, 1]  # a sampler of the caller's own is kept
        with pytest.raises(ConfigError, match=r"^shard=true: .*a sampler was passed too"):
            build_dataloader(data, {"batch_size": 2}, "cpu", sampler=[0, 1], shard=True)
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices, one a rank")
def test_two_ranks_on_two_gpus_train_with_nccl(compose: Compose) -> None:
    config = to_run_config(
        compose([*TWO, "trial.device=cuda", "loader.num_workers=1", "loader.pin_memory=true"])
    )
    result = run_trial(config)
    assert result.device == "cuda:0"  # rank 0's; rank 1 had cuda:1
    assert [r.rank for r in result.ranks] == [0, 1]
    assert result.effective_loader.pin_memory
    assert result.accelerator["gpu_memory_peak_mb"] > 0
    assert result.summary.samples == sum(r.samples for r in result.ranks)


def test_settings_tuned_for_ranks_load_as_the_loader_group() -> None:
    base = {"dataset": {"name": "synthetic_images"}, "model": {"name": "simulated"}}
    config = to_run_config(
        {**base, "storage": {"name": "local"}, "loader": {"num_workers": 3, "nproc_per_node": 2}}
    )
    assert config.loader.num_workers == 3  # the note is not a DataLoader setting


def test_steps_are_paced_as_data_parallel_training_paces_them(tmp_path: Path) -> None:
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        _paced_steps()  # its DDP modules are freed on return, before the group is destroyed
    finally:
        dist.destroy_process_group()


def _paced_steps() -> None:
    """The checks of the test above, in a function of their own: PyTorch deadlocks when a
    DDP reducer holding the last reference to a gloo process group is freed while gloo's
    thread still runs a step's callback (it waits for the GIL the freeing thread holds), so
    the reducers must go while the group lives, after a barrier has let that thread finish."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from loadertune.models._custom import ModuleStep
    from loadertune.models._steps import RealStep
    from loadertune.ranks.pacing import PacedStep, distribute

    cpu = torch.device("cpu")
    net = torch.nn.Linear(3, 2)
    real = RealStep(net, torch.optim.SGD(net.parameters(), lr=0.1), lambda n, x, y: n(x).sum())
    waits: list[str] = []
    paced_real = distribute(real, cpu, lambda: waits.append("wait"))
    assert isinstance(paced_real.network, DistributedDataParallel)
    module = ModuleStep("m", torch.nn.Linear(3, 2))
    assert isinstance(distribute(module, cpu, lambda: None).module, DistributedDataParallel)
    calls: list[str] = []
    paced = distribute(lambda batch: calls.append("step"), cpu, lambda: calls.append("beat"))
    assert isinstance(paced, PacedStep)
    paced(torch.zeros(2, 3))
    assert calls == ["step", "beat"]  # the rank's own work, then the all-reduce
    assert waits == []
    real((torch.ones(2, 3), torch.zeros(2)))  # a DDP step runs
    assert waits == ["wait"]  # its gradients' all-reduce: the rank waits for the others
    dist.barrier()  # gloo's thread has finished the step's callbacks


def test_two_ranks_stream_an_iterable_and_leave_each_passs_end_out_of_the_window(
    compose: Compose, fixtures_on_path: Path
) -> None:
    """One undeclared shard, two workers a rank: worker 1 of each rank never yields, and a
    pass of two batches ends inside the window on both ranks, which discard that step
    together so their windows keep the same steps."""
    config = to_run_config(
        compose(
            [
                *TWO,
                "dataset=custom",
                "dataset._target_=stream_data.ShardedVectors",
                "+dataset.n_shards=1",
                "+dataset.per_shard=8",
                "+dataset.declare=false",
                "model=mlp",
                "loader.batch_size=4",
                "loader.num_workers=2",
                "trial.precision=null",
                "trial.steps=6",
            ]
        )
    )
    seen: list[bool] = []
    result = run_trial(config, on_step=lambda record, timed: seen.append(timed))
    assert result.summary.steps == 6
    assert result.summary.samples == 6 * 4 * 2  # every rank's timed steps, none discarded
    assert seen.count(True) == 6  # the steps that met a pass's end went untimed
    figures = result.metrics()
    assert figures["window_reopens"] >= 1
    assert figures["idle_workers"] == 2  # one on each rank
    assert result.idle_workers == [1]
    assert not _running_children()
