"""Compose the real conf/ into a RunConfig for benchmark scripts (outputs/ under the repo)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# Workloads with different bottlenecks, as overrides of the default one.
SCENARIOS: dict[str, list[str]] = {
    # The default workload: the small CNN trains on the CPU and uses both cores; workers
    # can only take CPU away from it.
    "compute": [],
    # Decoding large JPEGs keeps the CPUs busy while an accelerator-like step (a sleep: no
    # CPU) waits: more workers than CPUs cannot help.
    "cpu": [
        "model=simulated",
        "model.step_ms=5",
        "dataset.image_size=256",
        "dataset.crop_size=224",
        "dataset.quality=95",
        "dataset.count=2048",
    ],
    # Every read waits 6 ms on a device that serves 32 reads at once, under a 40 ms
    # accelerator-like step: workers waiting on reads cost no CPU, so more workers than CPUs
    # hide the waits.
    "io": [
        "model=simulated",
        "model.step_ms=40",
        "storage=throttled",
        "storage.latency_ms=6",
        "storage.queue_depth=32",
        "storage.bandwidth_mb_s=2000",
    ],
    # An object store: every read waits 8 ms at almost no CPU and hundreds are served at
    # once; batch 32 under a 10 ms accelerator-like step. About 25 workers hide the reads,
    # 12 a core on 2 CPUs: past any multiple of the cores a range used to stop at.
    "object_store": [
        "dataset=array_shards",
        "storage=throttled",
        "storage.latency_ms=8",
        "storage.queue_depth=256",
        "storage.bandwidth_mb_s=4000",
        "model=simulated",
        "model.step_ms=10",
        "loader.batch_size=32",
    ],
    # A heavy tail (storage=object_store): reads return in 0.5 ms but about one in forty
    # stalls 120 ms (a cold miss); batch 32 under a 20 ms step. More than half the batches
    # hold a stall and in-order batches wait for their slowest read, so the workers needed
    # are set by the stalls in flight, not by the mean read, which a median wait understates.
    "stalls": [
        "dataset=array_shards",
        "storage=object_store",
        "model=simulated",
        "model.step_ms=20",
        "loader.batch_size=32",
    ],
}

# Grids chosen apart from any study (num_workers, prefetch factors), where the written space
# would be too wide to measure whole; other workloads' grids are their written space.
GRIDS: dict[str, tuple[list[int], list[int]]] = {
    "object_store": ([0, 4, 8, 12, 16, 20, 24, 28, 32, 40, 48], [2]),
    "stalls": ([0, 2, 3, 4, 6, 8, 12, 16, 24, 32], [2, 4]),
}


def compose_run_config(overrides: Sequence[str]) -> Any:
    """The RunConfig ``loadertune <overrides>`` would run, with tracking off."""
    from hydra import compose, initialize_config_dir

    from loadertune.checks import register_resolvers
    from loadertune.config import to_run_config

    register_resolvers()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                f"paths.output_root={ROOT / 'outputs'}",
                "tracking.enabled=false",
                *overrides,
            ],
        )
    return to_run_config(cfg)


def multirun(out: Path, args: Sequence[str]) -> tuple[subprocess.CompletedProcess[str], float]:
    """``loadertune -m paths.output_root=<out> <args>`` run in ``out``, and its wall time (s)."""
    script = str(Path(sys.executable).with_name("loadertune"))
    start = time.perf_counter()
    proc = subprocess.run(
        [script, "-m", f"paths.output_root={out}", *args],
        capture_output=True,
        text=True,
        cwd=out,
    )
    return proc, time.perf_counter() - start
