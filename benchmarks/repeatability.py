"""Repeatability: the same configuration measured N times in a row; the spread of the figure.

Beside each figure: the steps it took (``trial.precision`` stops a steady setting early), the
trial's own 95% interval (``rate_ci_pct``) and the CPU other processes used meanwhile
(``other_cpu_percent``), so a wide spread can be told from a busy machine.

.venv/bin/python benchmarks/repeatability.py [--repeats 5] [override ...]
"""

from __future__ import annotations

import argparse
import os
import statistics

from _common import compose_run_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    from loadertune import run_trial

    config = compose_run_config(args.overrides)
    run_trial(config)  # generate the dataset and warm the page cache
    load_before = os.getloadavg()
    results = [run_trial(config) for _ in range(args.repeats)]
    values = [r.objective for r in results]
    mean = statistics.mean(values)
    cv = statistics.stdev(values) / mean
    print(f"overrides: {' '.join(args.overrides) or '(defaults)'}")
    print(f"load average (1, 5, 15 min): before {load_before}, after {os.getloadavg()}")
    print(f"time per sample (ms): {[round(v, 4) for v in values]}")
    print(f"timed steps: {[r.summary.steps for r in results]}")
    print(f"rate_ci_pct: {[_round(r.rate_ci_pct) for r in results]}")
    print(f"other_cpu_percent: {[round(r.other_cpu_percent) for r in results]}")
    print(f"mean {mean:.4f}  median {statistics.median(values):.4f}  CV {100 * cv:.2f}%")


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


if __name__ == "__main__":
    main()
