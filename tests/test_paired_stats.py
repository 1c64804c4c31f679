"""The shared statistics: a sweep's verdict and AutoLoader decide alike on the same rounds."""

from __future__ import annotations

import random

import pytest
from optuna.distributions import IntDistribution
from optuna.trial import create_trial

from hydra_plugins.loadertune_sweeper.verdict import _candidates, _confidence
from loadertune import paired_stats
from loadertune.autoloader import _stats


def test_ratios_pair_only_the_rounds_both_were_measured_in() -> None:
    a = {0: 1.1, 1: 2.2, 3: 3.3}
    b = {0: 1.0, 1: 2.0, 2: 9.0}
    assert paired_stats.paired(a, b) == pytest.approx([1.1, 1.1])
    mid, low, high, noise = paired_stats.compare(a, b)
    assert (mid, low, high) == pytest.approx((1.1, 1.1, 1.1))
    assert noise == paired_stats.NOISE_FLOOR  # two equal ratios: only the floor


def test_without_shared_rounds_the_repeats_extremes_and_spread_decide() -> None:
    mid, low, high, noise = paired_stats.compare({0: 1.0, 1: 1.2}, {5: 1.0})
    assert (mid, low, high) == pytest.approx((1.1, 1.0, 1.2))
    assert noise == pytest.approx(0.2 / 1.1)
    assert paired_stats.measured_noise({0: 1.0, 1: 1.2}, {5: 1.0}) == pytest.approx(0.2 / 1.1)


def test_within_noise_is_the_floor_above_one_after_the_noise() -> None:
    assert paired_stats.within_noise(1.02, 0.0)
    assert not paired_stats.within_noise(1.05, 0.02)
    assert paired_stats.within_noise(1.05, 0.03)


def _candidate(workers: int, rounds: dict[int, float]) -> _candidates.Candidate:
    trial = create_trial(
        params={"loader.num_workers": workers},
        distributions={"loader.num_workers": IntDistribution(0, 16)},
        value=min(rounds.values()),
    )
    c = _candidates.Candidate(trial, [])
    c.rounds, c.values = list(rounds), list(rounds.values())
    c.memory_mb = [100.0] * len(rounds)
    return c


@pytest.mark.parametrize("seed", range(40))
def test_sweep_and_autoloader_pick_and_doubt_alike(seed: int) -> None:
    """Synthetic interleaved rounds: a drifting machine, settings a few % apart."""
    rng = random.Random(seed)
    true = {w: 1.0 + rng.choice([0.0, 0.01, 0.03, 0.08, 0.3]) for w in (0, 1, 2, 4)}
    drift = [rng.uniform(0.8, 1.3) for _ in range(rng.randint(2, 7))]
    times = {
        w: {r: t * d * rng.gauss(1.0, 0.02) for r, d in enumerate(drift)} for w, t in true.items()
    }
    rec = _candidates.recommend([_candidate(w, rounds) for w, rounds in times.items()])
    choice = _stats.recommend(times, cost={w: float(w) for w in times})
    assert (rec.chosen.workers, rec.fastest.workers) == (choice.chosen, choice.fastest)
    assert rec.tolerance == pytest.approx(choice.noise)
    cands = [_candidate(w, rounds) for w, rounds in times.items()]
    chosen = next(c for c in cands if c.workers == choice.chosen)
    for c in cands:
        if c is not chosen:
            assert _confidence.may_be_faster(chosen, c) == pytest.approx(
                paired_stats.may_be_faster(times[choice.chosen], times[c.workers])
            )
