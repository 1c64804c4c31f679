"""The throttled devices' ceilings: what N reading processes get, against the device model.

Each of N processes (forked) books R reads of S bytes on one shared simulated device, as
DataLoader workers do, and the aggregate MB/s and reads/s are compared with what the model
promises: each read holds one of ``queue_depth`` slots for its latency and its transfer, and
transfers share one channel, so the ceiling is min(bandwidth, k * S / (latency + S / bandwidth))
with k = min(queue_depth, N). Large reads show the bandwidth; small reads show the latency.
Configurations are interleaved and repeated; medians are reported.

.venv/bin/python benchmarks/throttle_ceiling.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from loadertune.storage import SharedDevice, ThrottledReader

PRESETS = {"hdd": (10.0, 160.0, 1), "nfs": (1.0, 110.0, 16)}  # latency ms, MB/s, queue depth
# (label, bytes per read, reads per process for 1 process; scaled down for more)
SIZES = [("16 MB reads", 16_000_000, 12), ("64 KB reads", 64_000, 120)]


def predicted_mb_s(latency_ms: float, bw: float, depth: int, procs: int, size: int) -> float:
    """The device model's aggregate ceiling for ``procs`` readers of ``size``-byte reads."""
    cycle = latency_ms / 1000 + size / (bw * 1e6)
    return min(bw, min(depth, procs) * size / 1e6 / cycle)


def _reader(reader: ThrottledReader, barrier: Any, reads: int, size: int, out: Any) -> None:
    barrier.wait()
    start = time.monotonic()
    for _ in range(reads):
        reader.charge(size)
    out.put((start, time.monotonic()))


def measure(device: SharedDevice, procs: int, reads: int, size: int) -> float:
    """Aggregate MB/s of ``procs`` processes, each booking ``reads`` reads of ``size`` bytes."""
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(procs), ctx.Queue()
    reader = ThrottledReader(device)
    workers = [
        ctx.Process(target=_reader, args=(reader, barrier, reads, size, out)) for _ in range(procs)
    ]
    for w in workers:
        w.start()
    spans = [out.get() for _ in workers]
    for w in workers:
        w.join()
    wall = max(e for _, e in spans) - min(s for s, _ in spans)
    return procs * reads * size / 1e6 / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    runs: dict[tuple[str, str, int], list[float]] = {}
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as d:
        for _ in range(args.repeats):
            for name, (latency, bw, depth) in PRESETS.items():
                for label, size, reads in SIZES:
                    for procs in (1, 8):
                        device = SharedDevice.create(Path(d) / "device", latency, bw, depth)
                        per_proc = max(2, reads // procs) if procs > 1 else reads
                        rate = measure(device, procs, per_proc, size)
                        runs.setdefault((name, label, procs), []).append(rate)
    print(
        f"{'device':6} {'reads':12} {'procs':>5} {'MB/s median':>12} {'model MB/s':>11} "
        f"{'ratio':>6} {'reads/s':>8}  all MB/s"
    )
    for (name, label, procs), rates in runs.items():
        latency, bw, depth = PRESETS[name]
        size = dict((lbl, s) for lbl, s, _ in SIZES)[label]
        med = statistics.median(rates)
        model = predicted_mb_s(latency, bw, depth, procs, size)
        print(
            f"{name:6} {label:12} {procs:>5} {med:>12.1f} {model:>11.1f} {med / model:>6.3f} "
            f"{med * 1e6 / size:>8.1f}  {[round(r, 1) for r in rates]}"
        )


if __name__ == "__main__":
    main()
