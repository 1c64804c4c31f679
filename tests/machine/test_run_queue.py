"""Waiting for a CPU told from waiting on reads, by the kernel's run-queue wait.

Real DataLoader workers beside a real CPU hog (``yes > /dev/null``): workers that sleep on
their reads are not runnable and wait for no CPU, workers that decode are ready to run and
queue for one. The meter the trial uses reads it; the diagnosis labels each accordingly. No
figure is compared with a timed value: only which side of the rule's threshold it falls on.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
from torch.utils.data import DataLoader, Dataset

from loadertune import run_trial
from loadertune.config._typed import to_run_config
from loadertune.machine._interference import InterferenceMeter
from loadertune.measure._diagnosis import CPU_CONTENDED, IO_BOUND, Diagnosis, diagnose
from tests._processes import cpu_hogs

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/schedstat"), reason="Linux")


class Reads(Dataset[int]):
    """Each item a 200 ms sleep (a slow read: long beside a loaded machine's wake-up delay)
    or 4 ms of decoding on the CPU."""

    def __init__(self, decode: bool) -> None:
        self.decode = decode

    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int) -> int:
        if not self.decode:
            time.sleep(0.2)
            return i
        end = time.perf_counter() + 0.004
        while time.perf_counter() < end:
            pass
        return i


def _window(decode: bool, workers: int, batches: int) -> tuple[float, float]:
    """(cpu_wait_procs, data wait share) of a loader's timed batches, metered as a trial."""
    it: Any = iter(DataLoader(Reads(decode), batch_size=1, num_workers=workers))
    for _ in range(2 * workers):
        next(it)  # the workers' first batches, loaded while they started
    meter = InterferenceMeter()
    meter.start()
    start = time.perf_counter()
    waited = 0.0
    for _ in range(batches):
        t0 = time.perf_counter()
        next(it)
        waited += time.perf_counter() - t0
        time.sleep(0.001)  # the step
    window = time.perf_counter() - start
    meter.stop()
    del it
    waiting = meter.cpu_wait_procs()
    assert waiting is not None
    return waiting, waited / window


def _label(cpu_wait: float, data_wait: float, workers: int) -> Diagnosis:
    """The label from the kernel's figure, the neighbour's CPU left out (that rule, ``busy
    machine``, is another's): what is tested is the run-queue wait alone."""
    return diagnose(
        num_workers=workers, data_wait_fraction=max(data_wait, 0.5), cpu_percent_mean=50.0,
        usable_cpus=2, copy_ms_mean=0.0, step_time_ms_p50=1.0, peak_memory_mb=100.0,
        cpu_wait_procs=cpu_wait,
    )  # fmt: skip


@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # more workers than CPUs
def test_a_hog_makes_decoding_workers_wait_for_a_cpu_not_sleeping_readers() -> None:
    cpus = len(os.sched_getaffinity(0))
    with cpu_hogs(2 * cpus):
        sleeping, sleep_wait = _window(decode=False, workers=2, batches=12)
        decoding, decode_wait = _window(decode=True, workers=2 * cpus, batches=120)
    assert _label(sleeping, sleep_wait, 2).label == IO_BOUND, sleeping
    found = _label(decoding, decode_wait, 2 * cpus)
    assert found.label == CPU_CONTENDED, decoding
    assert "wait for a CPU" in found.sentence and "cpu_wait_procs" in found.evidence


def test_a_trial_records_its_cpu_wait(compose: Any) -> None:
    result = run_trial(to_run_config(compose(["trial.precision=null", "loader.num_workers=1"])))
    assert result.cpu_wait_procs is not None and result.cpu_wait_procs >= 0.0
    assert "cpu_wait_procs" in result.metrics()
