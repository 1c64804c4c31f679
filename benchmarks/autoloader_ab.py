"""AutoLoader now against AutoLoader at another commit and a fixed 8 workers: the three-epoch
loop of ``benchmarks/autoloader.py``, each run in a fresh process, in rotated rounds, medians.

    git worktree add /tmp/old <commit>
    .venv/bin/python benchmarks/autoloader_ab.py --before /tmp/old/src [--workload io] [--rounds 9]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def one(arm: str, workload: str) -> None:
    """One run of the loop in this process; prints its wall time and the workers picked."""
    sys.path.insert(0, str(HERE))
    from autoloader import WORKLOADS, Simulated, settings, train

    from loadertune import AutoLoader, build_dataloader

    w = WORKLOADS[workload]
    ds = Simulated(134 * 16, w)
    if arm == "fixed8":
        loader = build_dataloader(ds, settings(8, 16), "cpu")
    else:
        loader = AutoLoader(ds, batch_size=16, shuffle=True, tune_steps=201)
    wall, seen = train(loader, 3, w.step_ms / 1000)
    assert sorted(seen) == sorted(list(range(len(ds))) * 3)
    pick = 8 if arm == "fixed8" else loader.settings["num_workers"]
    print(json.dumps({"wall": wall, "pick": pick}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, help="the other commit's src folder")
    p.add_argument("--workload", default="io")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        one(args.one, args.workload)
        return
    arms = {"fixed8": str(HERE.parent / "src"), "now": str(HERE.parent / "src"),
            "before": args.before}  # fmt: skip
    names = list(arms)
    walls: dict[str, list[float]] = {n: [] for n in names}
    picks: dict[str, list[int]] = {n: [] for n in names}
    print("uptime", os.popen("uptime").read().strip(), flush=True)
    for r in range(args.rounds):
        for n in names[r % 3 :] + names[: r % 3]:
            env = {**os.environ, "PYTHONPATH": arms[n], "PYTHONWARNINGS": "ignore"}
            arm = "fixed8" if n == "fixed8" else "auto"
            cmd = [sys.executable, __file__, "--before", args.before, "--workload",
                   args.workload, "--one", arm]  # fmt: skip
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            d = json.loads(out.stdout.strip().splitlines()[-1])
            walls[n].append(d["wall"])
            picks[n].append(d["pick"])
        print(r, {n: round(walls[n][-1], 3) for n in names}, "load", os.getloadavg()[0])
    m = {n: statistics.median(v) for n, v in walls.items()}
    print("median", {n: round(v, 3) for n, v in m.items()})
    fixed = m["fixed8"]
    print(f"now / fixed {m['now'] / fixed:.3f}, before / fixed {m['before'] / fixed:.3f}")
    print("now faster in", sum(a < b for a, b in zip(walls["now"], walls["before"], strict=True)))
    print("picks", picks, "\nuptime", os.popen("uptime").read().strip())


if __name__ == "__main__":
    main()
