"""Repeatability: the same configuration measured N times in a row; the spread of the figure.

.venv/bin/python benchmarks/repeatability.py [--repeats 5] [override ...]
"""

from __future__ import annotations

import argparse
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
    values = [run_trial(config).objective for _ in range(args.repeats)]
    mean = statistics.mean(values)
    cv = statistics.stdev(values) / mean
    print(f"overrides: {' '.join(args.overrides) or '(defaults)'}")
    print(f"time per sample (ms): {[round(v, 4) for v in values]}")
    print(f"mean {mean:.4f}  median {statistics.median(values):.4f}  CV {100 * cv:.2f}%")


if __name__ == "__main__":
    main()
