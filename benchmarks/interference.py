"""Interference: the same sweep on a quiet machine and beside a noisy neighbour.

For each workload (``cpu``: the default small CNN, which uses both cores; ``io``: reads that
wait on a throttled device under an accelerator-like sleep step) and each condition
(``quiet``; ``neighbour``: a real process that bursts one core for 0.5 s, then rests 0.5 s),
it runs ``loadertune -m`` ``--runs`` times from fresh output folders and keeps each run's
recommendation (``best_loader.yaml``) and confidence (``verdict.md``). Then every distinct
recommended setting is measured again on the quiet machine, interleaved, ``--repeats``
times; the reference is the best of those medians among the workload's quiet runs. A run
falls short when its recommendation's quiet median is more than 5% above that reference.
The target: no shortfall labelled ``high``.

    .venv/bin/python benchmarks/interference.py --runs 3 --repeats 3 [--outputs DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import compose_run_config, multirun

WORKLOADS: dict[str, list[str]] = {
    "cpu": [],
    "io": [
        "model=simulated",
        "model.step_ms=20",
        "storage=throttled",
        "storage.latency_ms=8",
        "storage.queue_depth=32",
        "storage.bandwidth_mb_s=1000",
    ],
}
SWEEP = ["hydra.sweeper.n_trials=6", "hydra.sweeper.verdict_repeats=3"]
NEIGHBOUR = (
    "import time\n"
    "while True:\n"
    "    t = time.monotonic()\n"
    "    while time.monotonic() - t < 0.5:\n"
    "        pass\n"
    "    time.sleep(0.5)\n"
)
SHORT_BY = 0.05


def sweep(out: Path, workload: str, neighbour: bool) -> dict[str, Any]:
    """One sweep; its recommendation's loader overrides and confidence."""
    out.mkdir(parents=True, exist_ok=True)
    if not list(out.glob("multirun/*/*/verdict.md")):
        hog = subprocess.Popen([sys.executable, "-c", NEIGHBOUR]) if neighbour else None
        try:
            proc, wall = multirun(out, [*WORKLOADS[workload], *SWEEP])
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()
        (out / "sweep.log").write_text(proc.stdout + proc.stderr + f"\nwall {wall:.1f}\n")
    (verdict,) = out.glob("multirun/*/*/verdict.md")
    level = re.search(r"Confidence: (\w+)\.", verdict.read_text())
    best = verdict.with_name("best_loader.yaml").read_text()
    loader = [
        f"loader.{k}={v}"
        for k, v in (line.split(": ", 1) for line in best.splitlines() if not line.startswith("#"))
    ]
    return {"loader": loader, "confidence": level.group(1) if level else "?"}


def remeasure(workload: str, settings: list[list[str]], repeats: int) -> list[list[float]]:
    """Each setting's time per sample, ``repeats`` times, interleaved, on this machine now."""
    from loadertune import run_trial

    configs = [compose_run_config([*WORKLOADS[workload], *s]) for s in settings]
    values: list[list[float]] = [[] for _ in settings]
    for _ in range(repeats):
        for i, config in enumerate(configs):
            values[i].append(run_trial(config).objective)
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workloads", default="cpu,io")
    parser.add_argument("--outputs", type=Path, default=None)
    args = parser.parse_args()
    root = args.outputs or Path(tempfile.mkdtemp(prefix="loadertune-interference-"))
    print(f"outputs: {root}; load average at start {os.getloadavg()}")
    print("| workload | condition | run | recommended | confidence | quiet ms/sample | short by |")
    print("|---|---|---|---|---|---|---|")
    for workload in args.workloads.split(","):
        runs = [
            (cond, k, sweep(root / workload / cond / str(k), workload, cond == "neighbour"))
            for cond in ("quiet", "neighbour")
            for k in range(args.runs)
        ]
        distinct = sorted({tuple(r["loader"]) for _, _, r in runs})
        medians = dict(
            zip(
                distinct,
                (
                    statistics.median(v)
                    for v in remeasure(workload, [list(d) for d in distinct], args.repeats)
                ),
                strict=True,
            )
        )
        reference = min(medians[tuple(r["loader"])] for c, _, r in runs if c == "quiet")
        for cond, k, r in runs:
            ms = medians[tuple(r["loader"])]
            short = ms / reference - 1
            chosen = " ".join(s for s in r["loader"] if "num_workers" in s or "prefetch" in s)
            flag = " **wrong and high**" if short > SHORT_BY and r["confidence"] == "high" else ""
            print(
                f"| {workload} | {cond} | {k} | {chosen} | {r['confidence']} | {ms:.3f} | "
                f"{short:+.1%}{flag} |"
            )
    print(f"load average at end {os.getloadavg()}")


if __name__ == "__main__":
    main()
