"""Time to first batch (every worker starting and opening its shards) as a verdict line."""

from __future__ import annotations

from optuna.distributions import IntDistribution
from optuna.trial import create_trial

from hydra_plugins.loadertune_sweeper.plan._baselines import Role
from hydra_plugins.loadertune_sweeper.verdict import _candidates
from hydra_plugins.loadertune_sweeper.verdict._text import details


def _cand(workers: int, repeats: list[float], first: list[float]) -> _candidates.Candidate:
    trial = create_trial(
        params={"loader.num_workers": workers},
        distributions={"loader.num_workers": IntDistribution(0, 8)},
        value=repeats[0],
    )
    c = _candidates.Candidate(trial, [Role.DEFAULT] if workers == 0 else [])
    c.values, c.rounds = repeats, list(range(len(repeats)))
    c.samples_per_s = [1000 / v for v in repeats]
    c.first_batch_s = first
    return c


def test_the_verdict_says_the_time_to_first_batch_of_each_setting() -> None:
    slow = _cand(0, [3.0, 3.1, 2.9], [0.05, 0.06, 0.05])
    fast = _cand(4, [1.0, 1.0, 1.01], [1.5, 2.5, 2.0])
    rec = _candidates.recommend([slow, fast])
    assert rec.chosen is fast
    (line,) = [t for t in details(rec, [slow, fast]) if t.startswith("Time to first batch")]
    assert "2.00 s for the recommendation" in line  # the median of its repeats
    assert "0 workers 0.05 s" in line


def test_settings_with_the_same_worker_count_are_told_apart_by_their_settings() -> None:
    chosen = _cand(0, [1.0, 1.0, 1.01], [0.05, 0.05, 0.05])
    a = _cand(2, [2.0, 2.1, 2.0], [0.15, 0.15, 0.15])
    b = _cand(2, [2.2, 2.3, 2.2], [0.18, 0.18, 0.18])
    b.trial.params["loader.prefetch_factor"] = 4
    rec = _candidates.recommend([chosen, a, b])
    (line,) = [t for t in details(rec, [chosen, a, b]) if t.startswith("Time to first batch")]
    assert "(workers=2 0.15 s, workers=2 prefetch=4 0.18 s)" in line


def test_no_line_without_repeats_that_measured_it() -> None:
    a = _cand(0, [3.0, 3.1, 2.9], [])
    b = _cand(4, [1.0, 1.0, 1.01], [])
    rec = _candidates.recommend([a, b])
    assert not any(t.startswith("Time to first batch") for t in details(rec, [a, b]))
