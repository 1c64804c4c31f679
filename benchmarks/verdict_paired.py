"""One verdict rule against another on the same simulated verdicts (common random numbers).

``verdict_confidence.py`` draws each verdict's measurements from one stream, so a rule that
measures one setting fewer shifts every draw after it and two runs compare different
verdicts. Here verdict ``i`` draws its settings and true times from seed ``i``, the machine's
speed in each round from ``(i, round)`` and each measurement from ``(i, round, workers)``
(``tests/verdict_sim.verdict``'s ``paired``): under two versions of the verdict's code the
same verdicts meet the same numbers, and only what the rule changed differs. The code judged
is whichever ``hydra_plugins`` imports: another checkout's with ``PYTHONPATH=OLD/src``.

    PYTHONPATH=OLD/src .venv/bin/python benchmarks/verdict_paired.py --out old.json
    .venv/bin/python benchmarks/verdict_paired.py --out new.json [--n 1500]
    .venv/bin/python benchmarks/verdict_paired.py --compare old.json new.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hydra_plugins.loadertune_sweeper as judged
from tests import verdict_sim as vs


def run(regime_name: str, n: int) -> list[dict[str, Any]]:
    """``n`` paired verdicts: each one's label, wrong pick, measurements and regret."""
    regime = vs.REGIMES[regime_name]
    outcomes = [vs.verdict(random.Random(i), regime, paired=i) for i in range(n)]
    return [{**asdict(o), "level": o.level.value} for o in outcomes]


def compare(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> None:
    """What the second rule changed against the first, verdict by verdict."""
    changed = [(a, b) for a, b in zip(old, new, strict=True) if a != b]
    picks = sum(a["regret"] != b["regret"] for a, b in changed)
    saved = sum(a["measurements"] - b["measurements"] for a, b in changed)
    labels = Counter((a["level"], b["level"]) for a, b in changed if a["level"] != b["level"])
    wrong_high = [sum(v["level"] == "high" and v["wrong"] for v in r) for r in (old, new)]
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
    parser.add_argument("--regime", default="scattered")
    parser.add_argument("--n", type=int, default=1500)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"))
    args = parser.parse_args()
    if args.compare:
        old, new = (json.loads(p.read_text()) for p in args.compare)
        compare(old, new)
        return
    results = run(args.regime, args.n)
    if args.out:
        args.out.write_text(json.dumps(results))
    print(
        f"{args.regime}: {len(results)} verdicts of the verdict in {Path(judged.__file__).parent}"
    )


if __name__ == "__main__":
    main()
