"""Bottleneck labels from a trial's figures, table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from loadertune.measure._diagnosis import BUSY_MACHINE, LABELS, diagnose

BASE: dict[str, Any] = {
    "num_workers": 2,
    "data_wait_fraction": 0.5,
    "cpu_percent_mean": 50.0,
    "usable_cpus": 2,
    "copy_ms_mean": 0.1,
    "step_time_ms_p50": 20.0,
    "peak_memory_mb": 500.0,
    "memory_budget_mb": 10_000.0,
}

CASES: list[tuple[dict[str, Any], str, str]] = [
    ({"data_wait_fraction": 0.02}, "compute-bound", "more workers cannot"),
    ({"num_workers": 0}, "loading in the training process", "workers would overlap"),
    ({"cpu_percent_mean": 190.0}, "cpu-bound loading", "95% of the 2 usable CPUs"),
    ({"cpu_percent_mean": 60.0}, "io-bound", "waiting on reads"),
    # The case: decoding beside a neighbour of 40% of a core, the CPUs 78% busy: the
    # kernel says the workers queued for a CPU, so it is no read they waited on.
    (
        {"cpu_percent_mean": 156.0, "other_cpu_percent": 40.0, "cpu_wait_procs": 1.4},
        "cpu-contended",
        "while 1.4 of the loader's processes, on average, wait for a CPU",
    ),
    ({"cpu_wait_procs": 0.1}, "io-bound", "0.1 of its processes queued for a CPU on average"),
    ({"copy_ms_mean": 8.0}, "copy-bound", "pin_memory"),
    ({"peak_memory_mb": 9_000.0}, "memory-limited", "9000 MB of a 10000 MB budget"),
    # A throttled device says whether it had room for more reads in flight.
    (
        {"storage": {"storage_busy_fraction": 0.98, "storage_bandwidth_fraction": 0.2}},
        "storage-bound",
        "read slots are busy 98% of the time",
    ),
    (
        {"storage": {"storage_busy_fraction": 0.3, "storage_bandwidth_fraction": 0.95}},
        "storage-bound",
        "bandwidth is in use 95% of the time",
    ),
    (
        {"storage": {"storage_busy_fraction": 0.4, "storage_bandwidth_fraction": 0.1}},
        "io-bound",
        "read slots are busy only 40% of the time",
    ),
    # A saturated device is the limit even when the CPUs are busy as well.
    (
        {
            "cpu_percent_mean": 190.0,
            "storage": {"storage_busy_fraction": 1.0, "storage_bandwidth_fraction": 0.1},
        },
        "storage-bound",
        "more workers only queue",
    ),
    # Other processes took a quarter of the usable CPUs or more while the step waited:
    # neither loading nor the storage can be blamed, whatever the tree's own CPU.
    (
        {"cpu_percent_mean": 190.0, "other_cpu_percent": 100.0},
        "busy machine",
        "other processes kept 50% of the 2 usable CPUs busy (100% of one core)",
    ),
    (
        {"cpu_percent_mean": 60.0, "other_cpu_percent": 40.0, "steal_percent": 15.0},
        "busy machine",
        "(40% of one core and the hypervisor stole 15%) while the step waited 50%",
    ),
    ({"cpu_percent_mean": 60.0, "other_cpu_percent": 45.0}, "io-bound", "waiting on reads"),
    ({"cpu_percent_mean": 190.0, "other_cpu_percent": 45.0}, "cpu-bound loading", "95%"),
    # A step that hardly waits is compute-bound on a busy machine too.
    (
        {"data_wait_fraction": 0.02, "other_cpu_percent": 150.0},
        "compute-bound",
        "more workers cannot",
    ),
]


@pytest.mark.parametrize(("change", "label", "phrase"), CASES)
def test_labels(change: dict[str, Any], label: str, phrase: str) -> None:
    d = diagnose(**{**BASE, **change})
    assert d.label == label
    assert phrase in d.sentence
    assert d.evidence["num_workers"] == change.get("num_workers", 2)


def test_memory_without_budget_is_not_a_limit() -> None:
    d = diagnose(**{**BASE, "peak_memory_mb": 9_000.0, "memory_budget_mb": None})
    assert d.label == "io-bound"
    assert "memory_share_of_budget" not in d.evidence


def test_busy_machine_is_relative_to_the_usable_cpus() -> None:
    # One core of other work is half of 2 usable CPUs but an eighth of 8.
    few = diagnose(**{**BASE, "other_cpu_percent": 100.0})
    many = diagnose(**{**BASE, "other_cpu_percent": 100.0, "usable_cpus": 8})
    assert few.label == BUSY_MACHINE
    assert many.label == "io-bound"
    assert few.evidence["other_share_of_usable"] == 0.5
    assert many.evidence["other_cpu_percent"] == 100.0
    assert "other_cpu_percent" not in diagnose(**BASE).evidence  # quiet: nothing to say


def test_every_label_is_listed() -> None:
    seen = {diagnose(**{**BASE, **change}).label for change, _, _ in CASES}
    assert seen == set(LABELS)
