"""Simulated verdicts with a known answer: how often the confidence label is wrong.

Each scenario draws 2 to 5 settings with true times per sample (ties, small gaps of a few
percent and large ones), then "measures" them the way a verdict does, round by round and
interleaved: every round the machine's speed drifts for all settings alike (``drift``), each
measurement has its own noise (``noise``), and other work takes ``busy`` % of one core. The
verdict's own rounds (``run_rounds``: the race, the early stop) and the real recommend /
assess code run on the values. A pick is wrong when its true
time is more than ``FASTER_BY`` above the true best's; the count that matters is wrong picks
labelled ``high``.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from optuna.distributions import IntDistribution
from optuna.trial import create_trial

from hydra_plugins.loadertune_sweeper.verdict import _candidates, _confidence
from hydra_plugins.loadertune_sweeper.verdict._race import run_rounds

REPEATS = 3
CPUS = 2
AS_FAST = 0.02  # a setting truly within this of the best is as fast (extra_workers)


@dataclass(frozen=True)
class Regime:
    """How a machine behaves while a verdict measures."""

    drift: float  # sd of the log speed of the machine, round to round
    noise: float  # sd of the log time of one measurement on top of the drift
    busy: float  # mean CPU other work takes, % of one core


REGIMES = {
    "quiet": Regime(0.02, 0.01, 5.0),
    "drifting": Regime(0.10, 0.02, 5.0),
    "noisy": Regime(0.10, 0.05, 15.0),
    # Little other work, yet each measurement scatters: a shared 2-core VM's rounds.
    "scattered": Regime(0.05, 0.08, 5.0),
    "busy": Regime(0.30, 0.08, 60.0),
    "overloaded": Regime(0.30, 0.15, 120.0),
}


def _candidate(workers: int, true_ms: float, number: int) -> _candidates.Candidate:
    trial = create_trial(
        params={"loader.num_workers": workers},
        distributions={"loader.num_workers": IntDistribution(0, 64)},
        value=true_ms,
    )
    trial.number = number
    return _candidates.Candidate(trial, [])


@dataclass(frozen=True)
class Outcome:
    """One simulated verdict's result."""

    level: _confidence.Confidence
    wrong: bool  # the pick's true time is more than FASTER_BY above the true best's
    measurements: int  # trial processes the verdict would have started
    regret: float  # the pick's true time over the true best's, less 1
    extra_workers: int  # the pick's workers over the fewest of any setting truly as fast


def verdict(rng: random.Random, regime: Regime, paired: int | None = None) -> Outcome:
    """One simulated verdict. ``paired``: the round's drift and each measurement come from
    their own seeds (this verdict's, the round's, the setting's) instead of ``rng``, so two
    rules that measure different settings still meet the same numbers for the same ones
    (benchmarks/verdict_paired.py)."""
    workers = sorted(rng.sample(range(9), rng.randint(2, 5)))
    gaps = [0.0, 0.0, rng.uniform(0, 0.15), rng.uniform(0, 0.6)]
    truth = {w: 1.0 + rng.choice(gaps) for w in workers}
    cands = [_candidate(w, truth[w], i) for i, w in enumerate(workers)]

    def draw(*at: int) -> random.Random:
        return rng if paired is None else random.Random("-".join(map(str, (paired, *at))))

    def measure(round_: int, which: list[_candidates.Candidate]) -> bool:
        speed = draw(round_).lognormvariate(0, regime.drift)
        for c in which:
            r = draw(round_, c.workers)
            c.values.append(truth[c.workers] * speed * r.lognormvariate(0, regime.noise))
            c.rounds.append(round_)
            c.memory_mb.append(100.0 + 50.0 * c.workers)
            c.other_cpu_percent.append(max(0.0, r.gauss(regime.busy, regime.busy / 3)))
            c.steal_percent.append(0.0)
        return True

    # The verdict's own rounds: early stop and the race included.
    run_rounds(cands, REPEATS, measure, lambda _: None, CPUS)
    rec = _candidates.recommend(cands)
    level = _confidence.assess(rec, cands, CPUS, REPEATS).level
    best = min(truth.values())
    picked = truth[rec.chosen.workers]
    wrong = picked > (1 + _confidence.FASTER_BY) * best
    enough = min(w for w, t in truth.items() if t <= (1 + AS_FAST) * best)
    return Outcome(
        level,
        wrong,
        sum(len(c.values) for c in cands),
        picked / best - 1,
        rec.chosen.workers - enough,
    )


def simulate(seed: int, regime: Regime, n: int) -> list[Outcome]:
    """``n`` simulated verdicts, drawn from ``seed``."""
    rng = random.Random(seed)
    return [verdict(rng, regime) for _ in range(n)]


def tally(seed: int, regime: Regime, n: int) -> Counter[tuple[str, bool]]:
    """(label, wrong) counts over ``n`` simulated verdicts."""
    return Counter((o.level.value, o.wrong) for o in simulate(seed, regime, n))
