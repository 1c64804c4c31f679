"""AutoLoader against fixed settings in three-epoch training loops, and its pick against the
grid's best re-measured side by side.

Three workloads, each a map-style dataset and a simulated accelerator step (a sleep: the
training process's CPUs stay free, as they do while a GPU computes):

- ``io``: every sample waits on a read (``--read-ms``, a latency-bound device such as the
  ``nfs`` storage preset; reads overlap freely), behind a short step.
- ``cpu``: every sample costs decode/augment CPU time (``--decode-ms`` of busy work).
- ``compute``: loading is cheap and the step is long.

Per workload, in one run: an exhaustive grid of ``num_workers`` (each timed over
``--grid-steps`` steps after its look-ahead) gives the best setting known in advance; then
the same three-epoch loop runs with the default (``num_workers=0``), "4 x cores" workers,
the grid's best, and AutoLoader (``tune_steps`` = half the run), in rounds that alternate
their order; the wall times are medians. Last, AutoLoader's settled setting and the grid's
best are re-measured side by side (interleaved, ``--repeats`` each, median of ratios).
The load average is printed before and after every workload: on a shared machine, read it
beside every figure.

    .venv/bin/python benchmarks/autoloader.py [--workloads io cpu compute] [--rounds 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import Dataset

from loadertune import AutoLoader, build_dataloader


@dataclass(frozen=True)
class Workload:
    name: str
    read_ms: float  # per sample, waiting (no CPU)
    decode_ms: float  # per sample, busy CPU
    step_ms: float  # per batch, the simulated accelerator step


class Simulated(Dataset[torch.Tensor]):
    """Samples that cost a read wait and a decode of CPU work each."""

    def __init__(self, n: int, w: Workload) -> None:
        self.n, self.w = n, w

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.w.read_ms:
            time.sleep(self.w.read_ms / 1000)
        if self.w.decode_ms:  # CPU time, not wall time: oversubscribed cores do not shrink it
            end = time.process_time() + self.w.decode_ms / 1000
            while time.process_time() < end:
                pass
        return torch.full((8,), i, dtype=torch.int64)


def settings(workers: int, batch_size: int) -> dict[str, Any]:
    return {
        "batch_size": batch_size,
        "num_workers": workers,
        "prefetch_factor": 2 if workers else None,
        "persistent_workers": workers > 0,
        "shuffle": True,
        "drop_last": False,
        "pin_memory": False,
    }


def train(loader: Any, epochs: int, step_s: float) -> tuple[float, list[int]]:
    """Wall time of ``epochs`` epochs of the loop, and every index seen."""
    seen: list[int] = []
    start = time.perf_counter()
    for _ in range(epochs):
        for batch in loader:
            time.sleep(step_s)
            seen += batch[:, 0].tolist()
    return time.perf_counter() - start, seen


def time_per_batch(ds: Dataset[Any], cfg: dict[str, Any], steps: int, step_s: float) -> float:
    """Seconds per batch of a fixed setting, after its look-ahead, in one long stream."""
    from torch.utils.data import RandomSampler

    w = cfg["num_workers"]
    warm = 1 + max(w * 2, 2)
    stream = RandomSampler(range(len(ds)), num_samples=(warm + steps + 1) * cfg["batch_size"])
    loader = build_dataloader(ds, {**cfg, "shuffle": False}, "cpu", sampler=stream)
    it = iter(loader)
    for _ in range(warm):
        next(it)
        time.sleep(step_s)
    start = time.perf_counter()
    for _ in range(steps):
        next(it)
        time.sleep(step_s)
    elapsed = time.perf_counter() - start
    if hasattr(it, "_shutdown_workers"):  # now, not in a later worker's copy (fork) at GC
        it._shutdown_workers()
    return elapsed / steps


def grid(ds: Dataset[Any], w: Workload, args: argparse.Namespace) -> dict[int, float]:
    """Seconds per batch of every num_workers in the grid: the median of ``--grid-passes``
    passes, each in the opposite order of the one before."""
    times: dict[int, list[float]] = {n: [] for n in args.grid}
    for p in range(args.grid_passes):
        for n in args.grid if p % 2 == 0 else reversed(args.grid):
            cfg = settings(n, args.batch_size)
            times[n].append(time_per_batch(ds, cfg, args.grid_steps, w.step_ms / 1000))
    return {n: statistics.median(t) for n, t in times.items()}


def wall_runs(ds: Dataset[Any], w: Workload, best: int, args: argparse.Namespace) -> dict:  # type: ignore[type-arg]
    """Median wall time of the three-epoch loop per contender, rounds in rotated order."""
    cores = len(os.sched_getaffinity(0))
    fixed = {"default (0 workers)": 0, f"4 x cores ({4 * cores})": 4 * cores, "grid best": best}
    names = [*fixed, "AutoLoader"]
    walls: dict[str, list[float]] = {n: [] for n in names}
    picks: list[AutoLoader] = []
    per_epoch = len(ds) // args.batch_size
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            if name == "AutoLoader":
                loader: Any = AutoLoader(
                    ds, batch_size=args.batch_size, shuffle=True,
                    tune_steps=int(args.tune_share * 3 * per_epoch),
                )  # fmt: skip
                picks.append(loader)
            else:
                loader = build_dataloader(ds, settings(fixed[name], args.batch_size), "cpu")
            wall, seen = train(loader, 3, w.step_ms / 1000)
            assert sorted(seen) == sorted(list(range(len(ds))) * 3), name  # exactly once
            walls[name].append(wall)
            if isinstance(loader, AutoLoader):
                loader.close()
            elif getattr(loader, "_iterator", None) is not None:  # persistent workers
                loader._iterator._shutdown_workers()
    return {"walls": walls, "auto": picks[-1]}


def side_by_side(
    ds: Dataset[Any], w: Workload, a: dict[str, Any], b: dict[str, Any], repeats: int, steps: int
) -> list[float]:
    """Throughput of setting ``a`` over that of ``b``, per round, interleaved A B, B A ..."""
    ratios = []
    for r in range(repeats):
        ta = tb = 0.0
        for which in "ab" if r % 2 == 0 else "ba":
            t = time_per_batch(ds, a if which == "a" else b, steps, w.step_ms / 1000)
            ta, tb = (t, tb) if which == "a" else (ta, t)
        ratios.append(tb / ta)
    return ratios


def run(w: Workload, args: argparse.Namespace) -> dict[str, Any]:
    load_before = os.getloadavg()
    ds = Simulated(args.batches * args.batch_size, w)
    g = grid(ds, w, args)
    best = min(g, key=lambda n: g[n])
    out = wall_runs(ds, w, best, args)
    auto: AutoLoader = out["auto"]
    picked = {k: v for k, v in auto.settings.items() if k in settings(0, 1)}
    ratios = side_by_side(
        ds, w, picked, settings(best, args.batch_size), args.repeats, args.grid_steps
    )
    return {
        "workload": w,
        "grid": g,
        "best": best,
        "walls": {k: statistics.median(v) for k, v in out["walls"].items()},
        "chosen": auto.settings,
        "confidence": auto.decision.assurance.level if auto.decision else "",
        "bottleneck": auto.decision.bottleneck if auto.decision else "",
        "throughput_vs_best": statistics.median(ratios),
        "ratios": ratios,
        "load": (load_before, os.getloadavg()),
        "report": auto.report(),
    }


def table(results: list[dict[str, Any]]) -> str:
    """The markdown table docs/autoloader.md shows."""
    rows = [
        "| workload | default s | 4 x cores s | grid best (workers) s | AutoLoader s | "
        "AutoLoader / best | AutoLoader picked | its throughput / best's (side by side) | "
        "load avg before → after |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        w = r["walls"]
        names = list(w)
        auto, best = w["AutoLoader"], w["grid best"]
        pick = r["chosen"]
        rows.append(
            f"| {r['workload'].name} | {w[names[0]]:.1f} | {w[names[1]]:.1f} | "
            f"{best:.1f} ({r['best']}) | {auto:.1f} | {auto / best:.2f}x | "
            f"{pick['num_workers']} workers, pf {pick['prefetch_factor']} "
            f"({r['confidence']}, {r['bottleneck']}) | {r['throughput_vs_best']:.2f} "
            f"(rounds {', '.join(f'{x:.2f}' for x in r['ratios'])}) | "
            f"{r['load'][0][0]:.2f} → {r['load'][1][0]:.2f} |"
        )
    return "\n".join(rows)


WORKLOADS = {
    "io": Workload("io (2 ms read/sample, 4 ms step)", 2.0, 0.0, 4.0),
    "cpu": Workload("cpu (0.5 ms decode/sample, 4 ms step)", 0.0, 0.5, 4.0),
    "compute": Workload("compute (0.1 ms read/sample, 25 ms step)", 0.1, 0.0, 25.0),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--batches", type=int, default=134, help="batches per epoch")
    p.add_argument("--tune-share", type=float, default=0.5, help="tune_steps / all steps")
    p.add_argument("--grid", type=int, nargs="+", default=[0, 1, 2, 4, 8, 16])
    p.add_argument("--grid-steps", type=int, default=60)
    p.add_argument("--grid-passes", type=int, default=2)
    p.add_argument("--rounds", type=int, default=1, help="wall-time rounds per contender")
    p.add_argument("--repeats", type=int, default=4, help="side-by-side repeats")
    args = p.parse_args()
    start = time.perf_counter()
    print(f"uptime: {os.popen('uptime').read().strip()}; usable CPUs {os.sched_getaffinity(0)}")
    results = []
    for name in args.workloads:
        r = run(WORKLOADS[name], args)
        results.append(r)
        grid_text = ", ".join(f"{n}: {1000 * t:.1f}" for n, t in r["grid"].items())
        print(f"\n## {r['workload'].name}\ngrid ms/batch {{{grid_text}}}\n{r['report']}")
    print("\n" + table(results))
    print(f"\nwhole benchmark {time.perf_counter() - start:.0f} s; uptime: "
          f"{os.popen('uptime').read().strip()}")  # fmt: skip


if __name__ == "__main__":
    main()
