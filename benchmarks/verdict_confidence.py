"""How often the verdict's confidence label is wrong, on simulated verdicts with known answers.

No timing: each verdict is drawn from a regime (drift, noise, other work) and run through the
real recommend / next_round / assess code (see ``tests/verdict_sim.py``). Prints, per regime,
how the labels fall, how many wrong picks (more than 5% slower than the true best) got
each label, how many measurements a verdict took and how much slower than the true best its
pick was on average. The target: no wrong pick labelled ``high``.

    .venv/bin/python benchmarks/verdict_confidence.py --n 3000 --seeds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.verdict_sim import REGIMES, simulate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3000, help="verdicts per regime and seed")
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    print(
        "| regime | verdicts | high | medium | low | wrong picks | wrong labelled high | "
        "measurements per verdict | mean regret | p95 regret | extra workers |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, regime in REGIMES.items():
        outcomes = [o for seed in range(args.seeds) for o in simulate(seed, regime, args.n)]
        counts = Counter((o.level.value, o.wrong) for o in outcomes)
        total = len(outcomes)
        share = {
            level: f"{(counts[(level, False)] + counts[(level, True)]) / total:.0%}"
            for level in ("high", "medium", "low")
        }
        wrong = sum(o.wrong for o in outcomes)
        per = statistics.mean(o.measurements for o in outcomes)
        regret = statistics.mean(o.regret for o in outcomes)
        p95 = statistics.quantiles([o.regret for o in outcomes], n=20)[-1]
        extra = statistics.mean(o.extra_workers for o in outcomes)
        print(
            f"| {name} (drift {regime.drift:.0%}, noise {regime.noise:.0%}, other "
            f"{regime.busy:.0f}% of a core) | {total} | {share['high']} | {share['medium']} | "
            f"{share['low']} | {wrong} | {counts[('high', True)]} | {per:.1f} | {regret:.2%} | "
            f"{p95:.2%} | {extra:+.2f} |"
        )


if __name__ == "__main__":
    main()
