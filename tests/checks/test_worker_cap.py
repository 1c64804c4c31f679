"""The most workers a loader may start (``preflight.worker_cap``): what memory, /dev/shm,
descriptors and shards hold, never a multiple of the CPUs; the one bound of the refusal, the
default range, the sweep's widened range and AutoLoader's probes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import SimpleNamespace

import psutil
import pytest
from omegaconf import DictConfig
from optuna.distributions import CategoricalDistribution, IntDistribution

from hydra_plugins.loadertune_sweeper.plan._sweep_plan import cap_range
from loadertune.autoloader import _loader
from loadertune.checks import _preflight as preflight
from loadertune.checks import _resolvers as resolvers
from loadertune.checks import _validation as validation
from loadertune.checks._shards import Shards
from loadertune.config._typed import LoaderConfig, to_run_config
from loadertune.errors import ConfigError
from loadertune.machine._host import CpuBudget

GB = 2**30
MB = 2**20


def _machine(monkeypatch: pytest.MonkeyPatch, memory_gb: float, nofile: int, cpus: int = 2) -> None:
    """A machine of ``memory_gb`` GB and ``cpus`` usable CPUs whose processes may each open
    ``nofile`` descriptors, with a /dev/shm of 1 GB."""
    total = int(memory_gb * GB)
    monkeypatch.setattr(
        psutil, "virtual_memory", lambda: SimpleNamespace(total=total, available=total)
    )
    monkeypatch.setattr(preflight.resource, "getrlimit", lambda _: (nofile, nofile))
    monkeypatch.setattr(
        preflight.shutil, "disk_usage", lambda _: SimpleNamespace(total=GB, free=GB)
    )
    budget = CpuBudget(cpus, "cgroup", 64, cpus)
    monkeypatch.setattr(validation, "cpu_budget", lambda: budget)
    monkeypatch.setattr("loadertune.machine._host.cpu_budget", lambda: budget)


def test_memory_caps_a_machine_and_the_refusal_says_what_each_worker_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _machine(monkeypatch, 4, 20000)  # 4 GB x 0.75 / 32 MB = 96; descriptors: 2,492
    preflight.check_worker_count(LoaderConfig(num_workers=96))  # 48 per CPU: no CPU bound
    with pytest.raises(ConfigError) as info:
        preflight.check_worker_count(LoaderConfig(num_workers=97))
    assert str(info.value) == (
        "loader.num_workers=97: would start more worker processes than this machine can hold "
        "(at most 96: 32 MB a worker in 75% of 4.0 GB of memory). "
        "Fix: use loader.num_workers<=96"
    )


def test_descriptors_cap_a_machine_with_memory_to_spare(monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, 64, 1024)  # (1024 - 64) // 8 = 120; memory holds 1,536
    cap = preflight.worker_cap()
    assert (cap.workers, cap.by) == (120, "descriptors")
    with pytest.raises(ConfigError, match=r"8 open descriptors a worker of RLIMIT_NOFILE 1024"):
        preflight.check_worker_count(LoaderConfig(num_workers=121))


def test_ranks_share_the_memory_not_each_process_descriptors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _machine(monkeypatch, 4, 1024)
    assert preflight.worker_cap(1).workers == 96
    assert (preflight.worker_cap(2).workers, preflight.worker_cap(2).by) == (48, "memory")
    _machine(monkeypatch, 64, 1024)  # memory: 768 per rank of 2; descriptors: 120 each
    assert (preflight.worker_cap(2).workers, preflight.worker_cap(2).by) == (120, "descriptors")
    _machine(monkeypatch, 4, 20000)
    with pytest.raises(ConfigError) as info:
        preflight.check_worker_count(LoaderConfig(num_workers=49), nproc_per_node=2)
    line = str(info.value)
    assert line.startswith("loader.num_workers=49: would start more worker processes")
    assert "(at most 48 per rank for 2 ranks: 32 MB a worker in 75% of 4.0 GB of memory " in line
    assert "shared by 2 ranks)" in line
    assert line.endswith("Fix: use loader.num_workers<=48 or fewer trial.nproc_per_node")


def test_each_workers_batches_count_against_memory_shm_and_descriptors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _machine(monkeypatch, 4, 20000)
    batch = preflight.Batch(8 * MB, 3)
    # Two batches of 8 MB a worker: /dev/shm holds 0.9 GB / 16 MB = 57 of them, memory
    # 3,072 / (32 + 16) = 64, descriptors (20000 - 64) // (8 + 2 x 3) = 1,424.
    cap = preflight.worker_cap(1, batch, 2)
    assert (cap.workers, cap.by) == (57, "/dev/shm")
    assert cap.why == "16.0 MB of batches a worker in 90% of 1.0 GB of /dev/shm"
    one = preflight.worker_cap(1, batch, 1)  # one batch: /dev/shm holds 115, memory 3,072 / 40
    assert (one.workers, one.by) == (76, "memory")
    assert preflight.worker_mb(batch, 1) == preflight.WORKER_MB + 8


def test_a_streaming_datasets_shards_cap_the_workers_per_rank(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _machine(monkeypatch, 4, 20000)
    cap = preflight.worker_cap(2, shards=Shards(6, "dataset.shards"))
    assert (cap.workers, cap.by) == (3, "shards")
    by_sample = Shards(6, "dataset.shards", by_sample=True)  # every reader gets work
    assert preflight.worker_cap(2, shards=by_sample).by == "memory"


def test_the_default_range_starts_at_twice_the_cpus_within_the_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _machine(monkeypatch, 4, 20000, cpus=8)
    assert resolvers.max_workers(2, 1) == 16
    assert resolvers.max_workers(2, 2) == 8
    _machine(monkeypatch, 0.25, 20000, cpus=8)  # 0.25 GB x 0.75 / 32 MB = 6 workers
    assert resolvers.max_workers(2, 1) == 6


def test_a_written_range_stops_at_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, 4, 20000)
    space = {"loader.num_workers": IntDistribution(0, 200, step=8)}
    assert cap_range(space, 1, None).workers == 96
    assert space["loader.num_workers"] == IntDistribution(0, 96, step=8)
    space = {"loader.num_workers": IntDistribution(0, 40)}
    assert cap_range(space, 1, None).by == "memory"
    assert space["loader.num_workers"] == IntDistribution(0, 40)  # within it: as written
    space = {"loader.num_workers": CategoricalDistribution([0, 8, 64, 128])}
    cap_range(space, 2, None)  # 48 per rank
    assert space["loader.num_workers"] == CategoricalDistribution([0, 8])


def test_autoloader_probes_up_to_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, 4, 20000)
    assert _loader._tuner(200, None, "cpu", {}, None).max_workers == 96
    assert _loader._tuner(200, None, "cpu", {}, None, ranks=2).max_workers == 48
    assert _loader._tuner(200, 5, "cpu", {}, None).max_workers == 5


def test_validate_refuses_past_the_cap_with_the_ranks(
    monkeypatch: pytest.MonkeyPatch, compose: Callable[[Sequence[str]], DictConfig]
) -> None:
    cfg = compose(["loader.num_workers=49", "trial.nproc_per_node=2"])
    _machine(monkeypatch, 4, 20000)
    config = to_run_config(cfg)
    with pytest.raises(ConfigError, match=r"per rank for 2 ranks"):
        validation.validate(config)
    validation.validate(to_run_config(compose(["loader.num_workers=48", "model=simulated"])))
