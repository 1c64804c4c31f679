"""How often the verdict's confidence label is wrong, on simulated verdicts with known answers.

No timing: each verdict is drawn from a regime (drift, noise, other work) and run through the
real recommend / still_open / assess code (see ``tests/verdict_sim.py``). Prints, per regime,
how the labels fall and how many wrong picks (more than 5% slower than the true best) got
each label. The target: no wrong pick labelled ``high``.

    .venv/bin/python benchmarks/verdict_confidence.py --n 3000 --seeds 3
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.verdict_sim import REGIMES, tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3000, help="verdicts per regime and seed")
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    print("| regime | verdicts | high | medium | low | wrong picks | wrong labelled high |")
    print("|---|---|---|---|---|---|---|")
    for name, regime in REGIMES.items():
        counts: Counter[tuple[str, bool]] = Counter()
        for seed in range(args.seeds):
            counts.update(tally(seed, regime, args.n))
        total = sum(counts.values())
        share = {
            level: f"{(counts[(level, False)] + counts[(level, True)]) / total:.0%}"
            for level in ("high", "medium", "low")
        }
        wrong = sum(n for (_, w), n in counts.items() if w)
        print(
            f"| {name} (drift {regime.drift:.0%}, noise {regime.noise:.0%}, other "
            f"{regime.busy:.0f}% of a core) | {total} | {share['high']} | {share['medium']} | "
            f"{share['low']} | {wrong} | {counts[('high', True)]} |"
        )


if __name__ == "__main__":
    main()
