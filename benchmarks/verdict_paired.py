"""One verdict rule against another on the same simulated verdicts (common random numbers).

``verdict_confidence.py`` draws each verdict's measurements from one stream, so a rule that
measures one setting fewer shifts every draw after it and two runs compare different
verdicts. Here verdict ``i`` draws its settings and true times from seed ``i``, the machine's
speed in each round from ``(i, round)`` and each measurement from ``(i, round, workers)``:
run under two checkouts, the same verdicts meet the same numbers, and only what the rule
changed differs. The real ``run_rounds``, ``recommend`` and ``assess`` of the checkout at
``--root`` run on them (``tests/verdict_sim.py``'s regimes and settings).

    .venv/bin/python benchmarks/verdict_paired.py --out new.json [--root .] [--n 1500]
    PYTHONPATH=OLD/src .venv/bin/python benchmarks/verdict_paired.py --root OLD --out old.json
    .venv/bin/python benchmarks/verdict_paired.py --compare old.json new.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

FASTER_BY = 0.05  # a pick more than this slower than the true best is wrong (the sim's rule)


def run(root: Path, regime_name: str, n: int) -> list[dict[str, Any]]:
    """``n`` paired verdicts under ``root``'s code: each one's regret, measurements, label."""
    sys.path.insert(0, str(root))
    from hydra_plugins.loadertune_sweeper.verdict import _candidates, _confidence
    from hydra_plugins.loadertune_sweeper.verdict._race import run_rounds
    from tests import verdict_sim as vs

    regime = vs.REGIMES[regime_name]
    out = []
    for i in range(n):
        rng = random.Random(i)
        workers = sorted(rng.sample(range(9), rng.randint(2, 5)))
        gaps = [0.0, 0.0, rng.uniform(0, 0.15), rng.uniform(0, 0.6)]
        truth = {w: 1.0 + rng.choice(gaps) for w in workers}
        cands = [vs._candidate(w, truth[w], k) for k, w in enumerate(workers)]

        def measure(round_: int, which: list[Any], i: int = i, truth: Any = truth) -> bool:
            speed = random.Random(f"{i}-{round_}").lognormvariate(0, regime.drift)
            for c in which:
                r = random.Random(f"{i}-{round_}-{c.workers}")
                c.values.append(truth[c.workers] * speed * r.lognormvariate(0, regime.noise))
                c.rounds.append(round_)
                c.memory_mb.append(100.0 + 50.0 * c.workers)
                c.other_cpu_percent.append(max(0.0, r.gauss(regime.busy, regime.busy / 3)))
                c.steal_percent.append(0.0)
            return True

        run_rounds(cands, vs.REPEATS, measure, lambda _: None, vs.CPUS)
        rec = _candidates.recommend(cands)
        level = _confidence.assess(rec, cands, vs.CPUS, vs.REPEATS).level.value
        regret = truth[rec.chosen.workers] / min(truth.values()) - 1
        out.append({"regret": regret, "measurements": sum(len(c.values) for c in cands),
                    "level": level})  # fmt: skip
    return out


def compare(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> None:
    """What the second rule changed against the first, verdict by verdict."""
    changed = [(a, b) for a, b in zip(old, new, strict=True) if a != b]
    picks = sum(a["regret"] != b["regret"] for a, b in changed)
    saved = sum(a["measurements"] - b["measurements"] for a, b in changed)
    labels = Counter((a["level"], b["level"]) for a, b in changed if a["level"] != b["level"])
    wrong_high = [
        sum(v["level"] == "high" and v["regret"] > FASTER_BY for v in r) for r in (old, new)
    ]
    print(
        f"{len(old)} verdicts: {len(changed)} changed; picks changed {picks}; measurements "
        f"{statistics.mean(a['measurements'] for a in old):.2f} -> "
        f"{statistics.mean(b['measurements'] for b in new):.2f} a verdict ({saved} fewer in "
        f"all); mean regret {statistics.mean(a['regret'] for a in old):.3%} -> "
        f"{statistics.mean(b['regret'] for b in new):.3%}; labels (old, new) "
        f"{dict(labels)}; wrong picks labelled high {wrong_high[0]} -> {wrong_high[1]}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--regime", default="scattered")
    parser.add_argument("--n", type=int, default=1500)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"))
    args = parser.parse_args()
    if args.compare:
        old, new = (json.loads(p.read_text()) for p in args.compare)
        compare(old, new)
        return
    results = run(args.root.resolve(), args.regime, args.n)
    if args.out:
        args.out.write_text(json.dumps(results))
    print(f"{args.regime}: {len(results)} verdicts under {args.root}")


if __name__ == "__main__":
    main()
