"""Trial cost: timed steps and seconds per trial, measuring until sure against a fixed count.

For each setting (default workload, 0, 2 and 4 workers) it runs, interleaved, a trial with
the default ``trial.precision`` (time until the rate is known within 2%, between ``steps``
and ``max_steps``) and one with ``trial.precision=null`` (exactly ``trial.steps``, as trials
did before), ``--repeats`` times each, and prints the median steps, seconds of the timed
window and of the whole trial, and the interval the figure reached (``rate_ci_pct``).

    .venv/bin/python benchmarks/trial_cost.py --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from _common import compose_run_config

SETTINGS = {
    "0 workers": ["loader.num_workers=0"],
    "2 workers": ["loader.num_workers=2"],
    "4 workers": ["loader.num_workers=4"],
}
MODES = {
    "until sure (precision 0.02)": [],
    "fixed 40 steps (precision null)": ["trial.precision=null"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from loadertune import run_trial

    rows: dict[tuple[str, str], list[tuple[int, float, float, float | None, float]]] = {}
    print(f"load average before: {os.getloadavg()}")
    for _ in range(args.repeats):
        for name, extra in SETTINGS.items():
            for mode, how in MODES.items():
                config = compose_run_config([*extra, *how])
                start = time.perf_counter()
                r = run_trial(config)
                wall = time.perf_counter() - start
                rows.setdefault((name, mode), []).append(
                    (r.summary.steps, r.summary.window_s, wall, r.rate_ci_pct, r.objective)
                )
    print(f"load average after: {os.getloadavg()}")
    print("| setting | timing | steps | window s | trial s | rate_ci_pct | ms/sample |")
    print("|---|---|---|---|---|---|---|")
    for (name, mode), got in rows.items():
        steps = statistics.median(g[0] for g in got)
        window = statistics.median(g[1] for g in got)
        wall = statistics.median(g[2] for g in got)
        cis = [g[3] for g in got if g[3] is not None]
        ci = f"{statistics.median(cis):.1f}" if cis else "-"
        ms = statistics.median(g[4] for g in got)
        print(f"| {name} | {mode} | {steps:.0f} | {window:.2f} | {wall:.1f} | {ci} | {ms:.3f} |")


if __name__ == "__main__":
    main()
