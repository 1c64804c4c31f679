"""The one decision core: a sweep's verdict and AutoLoader pick and doubt alike on the same
rounds (synthetic times, no timing here), and the core's own rules on plain maps."""

from __future__ import annotations

import random

import pytest
from optuna.distributions import IntDistribution
from optuna.trial import create_trial

from hydra_plugins.loadertune_sweeper.verdict import _candidates, _confidence
from loadertune import decision
from loadertune.autoloader._decision import decide
from loadertune.autoloader._schedule import Measure, Setting, Tuner
from loadertune.decision import Bound, Confidence

Times = dict[int, dict[int, float]]  # workers -> {round: seconds per batch}


def _candidate(workers: int, rounds: dict[int, float]) -> _candidates.Candidate:
    trial = create_trial(
        params={"loader.num_workers": workers},
        distributions={"loader.num_workers": IntDistribution(0, 16)},
        value=min(rounds.values()),
    )
    trial.number = workers
    c = _candidates.Candidate(trial, [])
    c.rounds, c.values = list(rounds), list(rounds.values())
    c.memory_mb = [100.0] * len(rounds)
    c.other_cpu_percent = [0.0] * len(rounds)  # a quiet machine: the sweep's own check is clear
    return c


def sweep_path(times: Times) -> tuple[int, int, Confidence, list[int]]:
    """The sweep's verdict on these rounds: (chosen, fastest, confidence, unsettled)."""
    cands = [_candidate(w, rounds) for w, rounds in times.items()]
    rec = _candidates.recommend(cands)
    got = _confidence.assess(rec, cands, cpus=2, repeats=3)
    return rec.chosen.workers, rec.fastest.workers, got.level, [c.workers for c in got.unsettled]


def autoloader_path(times: Times) -> tuple[int, int, Confidence, list[int]]:
    """AutoLoader's decision on the same rounds, fed as its probes' measures."""
    tuner = Tuner(budget=1000, cpus=2, max_workers=16)
    for w, rounds in times.items():
        s = Setting(w, 2 if w else None, w > 0)
        for r, t in rounds.items():
            tuner.measures.append(Measure(s, r, steps=1, counted=1, counted_s=t))
    d = decide(tuner, cpus=2)
    unsettled = [s.num_workers for s in d.assurance.unsettled]
    return d.chosen.num_workers, d.fastest.num_workers, d.assurance.level, unsettled


def _machine(speeds: list[float], true: dict[int, float], scatter: list[float]) -> Times:
    """Each setting's true time, times the machine's speed in each round, times a scatter
    that differs by setting (rotated), so the pairs do not cancel it exactly."""
    return {
        w: {r: t * d * scatter[(r + i) % len(scatter)] for r, d in enumerate(speeds)}
        for i, (w, t) in enumerate(true.items())
    }


QUIET = [1.0, 1.0, 1.0]
CASES = [
    # id, rounds, expected (chosen, fastest, confidence)
    (
        "a clear winner",
        _machine(QUIET, {0: 2.0, 2: 1.0, 4: 1.2}, [1.0, 1.01, 0.99]),
        (2, 2, "high"),
    ),
    # 1% apart with 2% of scatter: not shown within 2% of w4, so the faster w4 stands, and
    # w2 is named as not told apart.
    (
        "cheaper, not shown as fast",
        _machine(QUIET, {0: 2.0, 2: 1.01, 4: 1.0}, [1.0, 1.01, 0.99]),
        (4, 4, "medium"),
    ),
    # 0.5% apart, round by round within 0.2%: shown as fast, so the cheaper w2 is the pick.
    (
        "cheaper, shown as fast",
        _machine([1.0, 1.1, 0.9, 1.0], {0: 2.0, 2: 1.005, 4: 1.0}, [1.0, 1.001, 0.999, 1.0]),
        (2, 4, "high"),
    ),
    # The machine's speed wanders 2x: the pairs still agree, its repeats do not.
    ("a drifting machine", _machine([0.6, 1.0, 1.4], {0: 2.0, 2: 1.0}, [1.0]), (2, 2, "low")),
    ("one round", _machine([1.0], {0: 2.0, 2: 1.0}, [1.0]), (2, 2, "low")),
    ("two rounds", _machine([1.0, 1.05], {0: 2.0, 2: 1.0}, [1.0, 1.01]), (2, 2, "medium")),
    # Round-by-round ratios scatter by about 10%: noise pairing did not cancel.
    (
        "scattered ratios",
        _machine([1.0, 1.1, 0.9, 1.0], {0: 2.0, 2: 1.0}, [1.0, 1.04, 0.98, 1.02]),
        (2, 2, "medium"),
    ),
    (
        "four settings, five rounds",
        _machine(
            [1.0, 1.05, 0.95, 1.02, 0.98],
            {0: 3.0, 1: 1.6, 2: 1.0, 4: 0.99},
            [1.0, 1.004, 0.997, 1.002, 0.998],
        ),
        (2, 4, "high"),
    ),
]


@pytest.mark.parametrize(("times", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_sweep_and_autoloader_pick_and_doubt_alike(
    times: Times, expected: tuple[int, int, str]
) -> None:
    sweep, tuning = sweep_path(times), autoloader_path(times)
    assert sweep == tuning
    assert sweep[:3] == expected


def simulated(rng: random.Random, workers: list[int], rounds: int) -> Times:
    """Settings a few % apart on a machine whose speed drifts round to round, 2% scatter."""
    true = {w: 1.0 + rng.choice([0.0, 0.01, 0.03, 0.08, 0.3]) for w in workers}
    drift = [rng.uniform(0.8, 1.3) for _ in range(rounds)]
    return {
        w: {r: t * d * rng.gauss(1.0, 0.02) for r, d in enumerate(drift)} for w, t in true.items()
    }


@pytest.mark.parametrize("seed", range(40))
def test_alike_on_simulated_rounds(seed: int) -> None:
    """Synthetic interleaved rounds: a drifting machine, two settings a few % apart (with two
    settings the sweep's pooled noise is the pair's own, so nothing but the rules differs)."""
    rng = random.Random(seed)
    times = simulated(rng, rng.sample([0, 1, 2, 4, 8], 2), rng.randint(1, 7))
    assert sweep_path(times) == autoloader_path(times)


RANK = {Confidence.LOW: 0, Confidence.MEDIUM: 1, Confidence.HIGH: 2}


@pytest.mark.parametrize("seed", range(40))
def test_the_sweeps_own_checks_only_doubt_more(seed: int) -> None:
    """Four settings: the same pick; the sweep's noise pooled over all four can only add
    settings that may be faster, so its label is never above AutoLoader's."""
    rng = random.Random(seed)
    times = simulated(rng, [0, 1, 2, 4], rng.randint(2, 7))
    sweep, tuning = sweep_path(times), autoloader_path(times)
    assert sweep[:2] == tuning[:2]
    assert RANK[sweep[2]] <= RANK[tuning[2]]
    assert set(tuning[3]) <= set(sweep[3])


def test_the_pick_is_the_cheapest_shown_as_fast_as_the_fastest() -> None:
    times = {"a": {0: 1.0, 1: 1.1, 2: 0.9}, "b": {0: 1.01, 1: 1.11, 2: 0.91}, "c": {}}
    choice = decision.recommend(times, {"a": 2.0, "b": 1.0, "c": 0.0})  # "c": never measured
    assert (choice.chosen, choice.fastest) == ("b", "a")
    assert choice.ratio == pytest.approx(1.01)
    assert decision.recommend(times, {"a": 1.0, "b": 1.0, "c": 0.0}).chosen == "a"  # a tie
    slower = {"a": times["a"], "b": {r: 1.2 * t for r, t in times["a"].items()}}
    assert decision.recommend(slower, {"a": 2.0, "b": 1.0}).chosen == "a"


def test_the_fastest_is_judged_in_the_rounds_both_ran_not_by_which_rounds_they_were() -> None:
    """The pick measured a fourth round on a machine quieter than in the first three; the
    other setting left after three rounds, faster by 3-5% in each. By its own median the pick
    looks fastest (1.8 against 2.0); with the rounds' effects taken out, it is not."""
    times = {
        "pick": {0: 2.1, 1: 2.2, 2: 1.5, 3: 1.4},
        "left": {0: 2.0, 1: 2.1, 2: 1.45},
    }
    assert decision.fastest(times) == "left"
    assert decision.fastest({"a": {0: 1.0}, "b": {1: 2.0}}) == "a"  # no round shared: medians
    assert decision.fastest({"a": {0: 1.0, 1: 1.0}, "b": {0: 1.0, 1: 1.0}}) == "a"  # the first


def test_a_cheaper_setting_not_shown_as_fast_leaves_the_faster_standing() -> None:
    """Failing to tell two settings apart is not showing them alike: the cheaper one, 1%
    slower at the median but scattered by 10% round by round, is not the pick, and the
    choice says what it might cost."""
    times = {"fast": {0: 1.0, 1: 1.0, 2: 1.0}, "cheap": {0: 0.96, 1: 1.01, 2: 1.06}}
    choice = decision.recommend(times, {"fast": 4, "cheap": 1})
    assert (choice.chosen, choice.fastest, choice.may_cost) == ("fast", "fast", 0.0)
    unshown = choice.unshown["cheap"]
    assert unshown.ratio == pytest.approx(1.01)
    assert unshown.may_cost > 0.05  # the top of its interval: it may cost that much


def test_memory_is_a_cost_only_past_its_margin() -> None:
    """Two settings of one worker count shown as fast: the one whose memory reads 5% lower
    is not cheaper (a few batches in flight), so the faster is the pick; 20% lower is."""
    w4 = {0: 0.99, 1: 1.09, 2: 0.89}  # the fastest, with more workers
    times = {  # both shown as fast as w4: 0.5% and 0.8% slower in every round
        "pf4": {r: 1.005 * t for r, t in w4.items()},
        "pf1": {r: 1.008 * t for r, t in w4.items()},
        "w4": w4,
    }
    cost = {"pf4": 2, "pf1": 2, "w4": 4}
    close = decision.recommend(times, cost, {"pf4": 400.0, "pf1": 380.0, "w4": 500.0})
    assert (close.chosen, close.fastest) == ("pf4", "w4")
    far = decision.recommend(times, cost, {"pf4": 400.0, "pf1": 320.0, "w4": 500.0})
    assert far.chosen == "pf1"
    assert decision.cheaper(2, 2, 320.0, 400.0) and not decision.cheaper(2, 2, 380.0, 400.0)
    assert decision.cheaper(1, 2, 900.0, 100.0)  # fewer workers, whatever the memory
    assert not decision.cheaper(3, 2, 10.0, 900.0)
    # Without memory, the cost alone decides, as AutoLoader gives it.
    assert decision.recommend(times, {"pf4": 2.01, "pf1": 2.0, "w4": 4}).chosen == "pf1"


def test_confidence_reads_as_its_value() -> None:
    """Results files and MLflow tags hold the bare word."""
    assert f"{Confidence.HIGH}" == str(Confidence.HIGH) == "high"
    assert f"confidence {Confidence.LOW:>6}" == "confidence    low"
    assert Confidence("medium") is Confidence.MEDIUM
    f = decision.findings({"a": {0: 1.0}, "b": {0: 2.0}}, "a", "a")
    reasons = decision.shortfalls(f, "the pick was measured")
    got = decision.assurance(reasons, "never said")
    assert (got.level, got.why) == (Confidence.LOW, "The pick was measured 1 time(s).")


def test_the_guess_names_its_cap() -> None:
    kwargs = {"load_ms_per_batch": 900.0, "step_ms": 1.0, "cpu_share_of_loading": 0.0}
    capped = decision.guess(**kwargs, usable_cpus=2, max_workers=16)  # type: ignore[arg-type]
    assert (capped.workers, capped.bound) == (16, Bound.SEARCH_SPACE)
    named = decision.guess(  # type: ignore[arg-type]
        **kwargs, usable_cpus=2, max_workers=16, capped_by=Bound.MAX_WORKERS
    )
    assert (named.workers, named.bound.value) == (16, "max_workers")
    assert named.time_per_sample_ms == pytest.approx(900.0 / 16)  # batch size 1: per batch


def test_a_rival_gets_rounds_while_they_are_worth_what_they_may_win_back() -> None:
    """A rival that may beat the pick by more than the tolerance is open while its next
    round is expected to win back ``min_gain`` of throughput; past that it is done (it
    leaves, too close to tell apart at the price), and so is one shown slower."""
    times = {
        "pick": {0: 1.00, 1: 1.00, 2: 1.00},
        "rival": {0: 0.96, 1: 1.05, 2: 1.01},  # within 5% either way: may be faster
        "slow": {0: 1.40, 1: 1.42, 2: 1.41},
    }
    cost = {"pick": 1, "rival": 2, "slow": 0}
    cheap = decision.worth_a_round(times, cost, most=6, min_gain=1e-6)
    assert cheap.choice.chosen == "pick"
    assert cheap.open["rival"] == decision.RIVAL and "pick" in cheap.open
    assert cheap.done == {"slow": decision.SLOWER}
    dear = decision.worth_a_round(times, cost, most=6, min_gain=0.5)
    assert dear.open == {} and dear.done == {"rival": decision.STUCK, "slow": decision.SLOWER}


@pytest.mark.parametrize(
    ("most", "said"),
    [(0.06, "up to 6%"), (0.999, "up to 100%"), (1763.82, "more than 100%: too few rounds")],
)
def test_how_much_faster_a_setting_may_be_reads_as_a_figure(most: float, said: str) -> None:
    assert decision.up_to(most).startswith(said)
