"""A verdict that stops when it knows, on synthetic rounds: a setting that loses every round
leaves the race, a round runs only while it can still change the pick or lift its label, and
settings no round can settle leave together."""

from __future__ import annotations

import random
from collections.abc import Callable

from optuna.distributions import IntDistribution
from optuna.trial import create_trial

from hydra_plugins.loadertune_sweeper.plan._baselines import Role
from hydra_plugins.loadertune_sweeper.verdict import _candidates, _text
from hydra_plugins.loadertune_sweeper.verdict._confidence import assess
from hydra_plugins.loadertune_sweeper.verdict._race import rotated, run_rounds
from loadertune.decision import Confidence, out_of_race


def _cand(workers: int, searched_ms: float = 1.0) -> _candidates.Candidate:
    trial = create_trial(
        params={"loader.num_workers": workers},
        distributions={"loader.num_workers": IntDistribution(0, 8)},
        value=searched_ms,
    )
    trial.number = workers
    return _candidates.Candidate(trial, [])


Truth = Callable[[int, int], float]  # (workers, round) -> the time measured


def _measurer(truth: Truth, log: list[tuple[int, int]]) -> Callable[..., bool]:
    def measure(round_: int, which: list[_candidates.Candidate]) -> bool:
        for c in which:
            log.append((round_, c.workers))
            c.values.append(truth(c.workers, round_))
            c.rounds.append(round_)
            c.memory_mb.append(100.0 * (1 + c.workers))
            c.other_cpu_percent.append(2.0)
            c.steal_percent.append(0.0)
        return True

    return measure


def _quiet(times: dict[int, float], seed: int = 1) -> Truth:
    rng = random.Random(seed)
    drift = [rng.uniform(0.9, 1.1) for _ in range(20)]  # the machine's speed, round by round
    return lambda w, r: times[w] * drift[r] * (1 + 0.003 * ((r + w) % 3 - 1))


def test_a_setting_losing_every_round_leaves_the_race() -> None:
    cands = [_cand(0), _cand(2), _cand(4)]
    log: list[tuple[int, int]] = []
    notes: list[str] = []
    truth = _quiet({0: 2.0, 2: 1.0, 4: 1.01})
    rounds = run_rounds(cands, 3, _measurer(truth, log), notes.append, cpus=2)
    slow = cands[0]
    assert slow.left_after == 2 and len(slow.values) == 2  # out after two rounds, not three
    assert rounds is not None and sum(1 for r, w in log if w == 0) == 2
    assert any("trial 0" in n and "leaves the race" in n for n in notes)
    rec = _candidates.recommend(cands)
    assert rec.chosen.workers in (2, 4) and slow not in _candidates.in_race(cands)


def test_a_setting_far_behind_in_the_search_and_its_first_round_leaves_after_it() -> None:
    cands = [_cand(0, 2.1), _cand(2), _cand(4, 1.02)]
    cands[0].roles.append(Role.DEFAULT)
    log: list[tuple[int, int]] = []
    notes: list[str] = []
    truth = _quiet({0: 2.0, 2: 1.0, 4: 1.01})
    run_rounds(cands, 3, _measurer(truth, log), notes.append, cpus=2)
    slow = cands[0]
    assert slow.left_after == 1 and [r for r, w in log if w == 0] == [0]  # one round only
    assert slow.left_why == _candidates.LEFT_FAR
    assert any("trial 0" in n and "in the search and in its first round" in n for n in notes)
    rec = _candidates.recommend(cands)
    assert rec.chosen.workers in (2, 4)
    assessed = assess(rec, cands, 2, 3)
    assert "trial 0" not in assessed.why  # lost: no rival of the pick
    mid, low, high = rec.speedups[Role.DEFAULT]  # the speed-up line stands on its one round
    assert 1.8 < mid < 2.2 and low <= mid <= high
    assert "speed-up over default (0 workers)" in "\n".join(_text.details(rec, cands))


def test_a_setting_far_behind_in_one_round_but_close_in_the_search_gets_its_second() -> None:
    """One round that far off may be that round's accident; the search's trial, timed apart
    from it, must agree before the setting leaves after one."""
    truth = _quiet({0: 2.0, 2: 1.0, 4: 1.01})
    for searched in (1.4, 1.05):  # within FAR_BEHIND of the fastest's search trial
        cands = [_cand(0, searched), _cand(2), _cand(4)]
        log: list[tuple[int, int]] = []
        run_rounds(cands, 3, _measurer(truth, log), lambda _: None, cpus=2)
        assert cands[0].left_after == 2 and cands[0].left_why == _candidates.LEFT_RACE
        assert [r for r, w in log if w == 0] == [0, 1]


def test_rounds_stop_once_the_pick_is_settled() -> None:
    cands = [_cand(0), _cand(2)]
    log: list[tuple[int, int]] = []
    truth = _quiet({0: 1.5, 2: 1.0})
    rounds = run_rounds(cands, 6, _measurer(truth, log), lambda _: None, cpus=2)
    # Six repeats asked; a clear pick on a quiet machine is settled after three rounds.
    assert rounds == 3
    rec = _candidates.recommend(cands)
    assert rec.chosen.workers == 2
    assert assess(rec, cands, 2, 6).level == Confidence.HIGH


def test_a_close_call_gets_more_rounds_of_the_open_settings_only() -> None:
    cands = [_cand(0), _cand(2), _cand(8)]
    log: list[tuple[int, int]] = []
    notes: list[str] = []
    # 2 workers 0.5% slower than 8 but scattered by 2% in the first rounds: not yet shown as
    # fast, and at that scatter five rounds can show it; 0 workers far slower in every round.
    times = {0: [3.0] * 6, 8: [1.0] * 6, 2: [1.0, 1.02, 1.0, 1.005, 1.0, 1.0]}
    truth: Truth = lambda w, r: times[w][r]  # noqa: E731
    rounds = run_rounds(cands, 3, _measurer(truth, log), notes.append, cpus=2)
    assert rounds is not None and 3 < rounds < 6
    assert {w for r, w in log if r >= 2} == {2, 8}  # the extra rounds are the open settings'
    assert cands[0].left_after == 2 and cands[0].left_why == _candidates.LEFT_RACE
    assert _candidates.recommend(cands).chosen.workers == 2  # now shown as fast: the pick
    assert notes[-1].startswith(f"verdict: settled, after {rounds} rounds (")


def test_settings_too_scattered_to_tell_apart_stop_the_rounds_early() -> None:
    cands = [_cand(0), _cand(2), _cand(8)]
    log: list[tuple[int, int]] = []
    notes: list[str] = []
    # 2 and 8 workers too close to call, on a machine whose rounds scatter: their round-by-
    # round ratios range over 20%, so no number of rounds allowed would tell them apart
    # within 2%. The rounds stop at three instead of six, and the advice is a quieter
    # machine, not more repeats. 0 workers is far slower in every round.
    times = {0: [3.0] * 6, 2: [1.0] * 6, 8: [0.90, 1.10, 0.98, 0.92, 1.08, 0.99]}
    truth: Truth = lambda w, r: times[w][r]  # noqa: E731
    rounds = run_rounds(cands, 3, _measurer(truth, log), notes.append, cpus=2)
    assert rounds == 3 and not [w for r, w in log if r >= 3]
    assert notes[-1].startswith("verdict: too close to call in the rounds allowed, after 3 rounds")
    rec = _candidates.recommend(cands)
    assurance = assess(rec, cands, 2, 3)
    assert assurance.scattered and assurance.level == Confidence.LOW and assurance.unsettled
    assert "quieter machine" in assurance.settle and "trial.steps" in assurance.settle
    assert "verdict_repeats" not in assurance.settle


def test_a_stop_mid_verdict_ends_the_rounds() -> None:
    cands = [_cand(0), _cand(2)]
    assert run_rounds(cands, 3, lambda r, which: r < 1, lambda _: None, cpus=2) is None


def test_out_of_race_needs_two_shared_rounds_each_lost_by_more_than_the_floor() -> None:
    assert out_of_race({"a": {0: 1.0}, "b": {0: 2.0}}) == []
    assert out_of_race({"a": {0: 1.0, 1: 1.1}, "b": {0: 2.0, 1: 2.1}}) == ["b"]
    # Slower at the median, but one round within 2% of the fastest: it stays.
    assert out_of_race({"a": {0: 1.0, 1: 1.0, 2: 1.0}, "b": {0: 1.3, 1: 1.01, 2: 1.3}}) == []
    # Lost every round by 3% or more, however much the rounds scatter: it leaves (an
    # interval around the median of 1.03, 1.40, 1.05 would have kept it).
    assert out_of_race({"a": {0: 1.0, 1: 1.0, 2: 1.0}, "b": {0: 1.03, 1: 1.4, 2: 1.05}}) == ["b"]


def test_the_verdict_says_how_many_rounds_it_needed() -> None:
    cands = [_cand(0), _cand(2)]
    cands[0].left_after = 2
    cands[0].values, cands[0].rounds = [2.0, 2.1], [0, 1]
    cands[1].values, cands[1].rounds = [1.0, 1.1, 1.2], [0, 1, 2]
    line = _text.rounds_line(3, 3, cands)
    assert "Rounds: 3" in line and "trial 0 after 2" in line
    # The repeats behind the medians, round by round; the one that left is blank after.
    table = line[line.index("| round |") :].strip().splitlines()
    assert table[0] == "| round | trial 0 | trial 2 |"
    assert table[2:] == ["| 0 | 2.0000 | 1.0000 |", "| 1 | 2.1000 | 1.1000 |", "| 2 | - | 1.2000 |"]


def test_the_rounds_change_the_order_of_their_settings() -> None:
    cands = [_cand(0), _cand(2), _cand(8)]
    log: list[tuple[int, int]] = []
    # Within noise of one another: all three run each of the first three rounds.
    times = {0: [1.0] * 6, 2: [1.0, 1.1, 0.9, 1.0, 1.1, 0.9], 8: [1.1, 0.9, 1.0, 1.1, 0.9, 1.0]}
    truth: Truth = lambda w, r: times[w][r]  # noqa: E731
    rounds = run_rounds(cands, 3, _measurer(truth, log), lambda _: None, cpus=2)
    assert rounds is not None and rounds >= 3
    orders = [[w for r, w in log if r == round_] for round_ in range(3)]
    assert orders == [[0, 2, 8], [8, 2, 0], [2, 8, 0]]
    # No setting keeps its place, and the one measured first moves on every two rounds.
    assert all(len({o.index(w) for o in orders}) >= 2 for w in (0, 2, 8))
    assert rotated(cands, 4)[0] is cands[2]
    # The values stay with their settings and rounds, whatever the order.
    for c in cands:
        assert c.values == [times[c.workers][r] for r in c.rounds]
        assert c.rounds[:3] == [0, 1, 2]


def test_rounds_are_timed_and_priced_against_the_training_they_serve() -> None:
    from hydra_plugins.loadertune_sweeper.verdict._race import Pricing
    from loadertune.decision import MIN_GAIN

    now = [0.0]

    def clock() -> float:
        return now[0]

    def measure(round_: int, which: list[_candidates.Candidate]) -> bool:
        now[0] += 5.0 * len(which)  # five seconds a measurement
        return True

    priced = Pricing(train_hours=1.0, clock=clock)
    assert priced.min_gain() == MIN_GAIN  # nothing timed yet
    assert priced.timed(measure, 0, [_cand(0), _cand(2)])
    assert (priced.spent_s, priced.measured) == (10.0, 2)
    # A rival's round (it and the pick, 10 s) must win back 10 s of a 1-hour run.
    assert priced.min_gain() == 10.0 / 3600
    longer = Pricing(train_hours=100.0, clock=clock)
    longer.timed(measure, 0, [_cand(0), _cand(2)])
    assert longer.min_gain() == 10.0 / 360000  # a long run makes every round worth more
    assert Pricing().min_gain() == MIN_GAIN


def test_the_verdict_says_what_its_rounds_cost() -> None:
    cands = [_cand(0), _cand(2)]
    cands[0].values, cands[0].rounds = [2.0, 2.1], [0, 1]
    cands[1].values, cands[1].rounds = [1.0, 1.1, 1.2], [0, 1, 2]
    line = _text.rounds_line(3, 3, cands, spent_s=42.4, train_hours=12)
    assert "5 measurements in 42 s" in line and "train_hours=12" in line
    assert "0.5% of throughput" in _text.rounds_line(3, 3, cands, spent_s=42.4)
