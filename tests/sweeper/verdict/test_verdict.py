"""Baselines and the verdict's recommendation, on hand-made trials."""

from __future__ import annotations

from collections import Counter

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import create_trial

from hydra_plugins.loadertune_sweeper.plan import _baselines
from hydra_plugins.loadertune_sweeper.plan._baselines import Role
from hydra_plugins.loadertune_sweeper.verdict import _candidates
from loadertune.loader._build import loader_yaml
from loadertune.measure import _paired_stats as paired_stats

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACE = {
    "loader.num_workers": IntDistribution(0, 6),
    "loader.prefetch_factor": CategoricalDistribution([1, 2, 4]),
}


def test_initial_baselines_default_start_small_rule_of_thumb() -> None:
    got = _baselines.initial(SPACE, usable_cpus=2)
    assert got == [
        ({"loader.num_workers": 0}, "default"),
        ({"loader.num_workers": 2, "loader.prefetch_factor": 2}, "start_small"),
        ({"loader.num_workers": 6, "loader.prefetch_factor": 2}, "rule_of_thumb"),
    ]


def test_rule_of_thumb_equal_to_start_small_is_not_repeated() -> None:
    space = {"loader.num_workers": IntDistribution(0, 2)}
    labels = [label for _, label in _baselines.initial(space, usable_cpus=8)]
    assert labels == ["default", "start_small"]


def _trial(workers: int, value: float, baseline: str | None = None) -> optuna.trial.FrozenTrial:
    return create_trial(
        params={"loader.num_workers": workers},
        distributions={"loader.num_workers": SPACE["loader.num_workers"]},
        value=value,
        user_attrs={"baseline": baseline} if baseline else {},
    )


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({2: 1.0, 4: 0.8}, {"loader.num_workers": 8}),  # 4 beat 2: try 8
        ({2: 1.0, 4: 0.99}, None),  # 4 did not help by 2%: stop
    ],
)
def test_doubling_continues_only_while_it_helps(
    values: dict[int, float], expected: dict[str, int] | None
) -> None:
    study = optuna.create_study()
    study.add_trial(_trial(2, values[2], "start_small"))
    four = _trial(4, values[4], "doubling")
    study.add_trial(four)
    space = {**SPACE, "loader.num_workers": IntDistribution(0, 16)}
    got = _baselines.next_rung(study, study.trials[-1], space)
    if expected is None:
        assert got is None
    else:
        assert got == {**expected, "loader.prefetch_factor": 2}


def _cand(
    workers: int, values: list[float], memory: float = 100.0, roles: list[Role] | None = None
) -> _candidates.Candidate:
    c = _candidates.Candidate(_trial(workers, min(values)), roles or [])
    c.values = values
    c.memory_mb = [memory] * len(values)
    c.samples_per_s = [1000 / v for v in values]
    return c


def test_recommends_the_cheapest_shown_as_fast() -> None:
    fast = _cand(4, [1.00, 1.02, 0.98])
    close = _cand(2, [1.006, 1.025, 0.988])  # 0.6%, 0.5%, 0.8% slower round by round
    slow = _cand(0, [2.0, 2.05, 1.95], roles=[Role.DEFAULT])  # it follows the machine too
    rec = _candidates.recommend([fast, close, slow])
    assert rec.fastest is fast
    assert rec.chosen is close
    assert 0.005 < rec.may_cost <= paired_stats.TOLERANCE  # the top of its interval
    assert rec.unshown == []  # 0 workers is cheaper, but shown far slower
    mid, low, high = rec.speedups[Role.DEFAULT]
    assert mid == pytest.approx(2.0 / 1.006)  # the median of the rounds' ratios
    assert low == pytest.approx(1.95 / 0.988)
    assert high == pytest.approx(2.05 / 1.025)


def test_a_cheaper_setting_the_noise_hides_is_not_the_pick() -> None:
    """Not told apart is not shown as fast: 1.03, 0.99, 1.07 of the fastest round by round
    (3% slower at the median) leaves the faster standing, and says what it might cost."""
    fast = _cand(4, [1.00, 1.02, 0.98])
    close = _cand(2, [1.03, 1.01, 1.05])
    close.trial.number = 7
    rec = _candidates.recommend([fast, close])
    assert rec.chosen is fast and rec.is_fastest and rec.may_cost == 0.0
    [(named, unshown)] = rec.unshown
    assert named is close and unshown.ratio == pytest.approx(1.03)
    assert unshown.may_cost > paired_stats.TOLERANCE
    from hydra_plugins.loadertune_sweeper.verdict import _text

    [line] = _text.unshown_lines(rec, repeats=3)
    assert line.startswith("Cheaper, not shown as fast: num_workers=2 (trial 7), +3.0% at")
    assert "what would settle it:" in line


def test_a_real_gap_is_not_noise() -> None:
    fast = _cand(4, [1.00, 1.01, 0.99])
    slower = _cand(2, [1.20, 1.21, 1.19])
    assert _candidates.recommend([fast, slower]).chosen is fast


def test_a_steady_gap_shows_through_the_machines_drift() -> None:
    # The machine slows by 40% over the rounds, alike for both settings: each setting's own
    # repeats range over 33%, but round by round the 2-worker setting is 6% slower every time.
    fast = _cand(4, [1.0, 1.2, 1.4])
    cheaper = _cand(2, [1.06, 1.27, 1.484])
    assert _candidates.recommend([fast, cheaper]).chosen is fast
    assert _candidates.compare(cheaper, fast)[0] == pytest.approx(1.06, abs=0.002)


def test_slower_in_every_round_is_slower_however_noisy() -> None:
    # 0 workers 20% to 60% slower round by round: noisy, but never close to the fastest.
    fast = _cand(3, [1.0, 1.0, 1.0])
    zero = _cand(0, [1.2, 1.39, 1.59])
    rec = _candidates.recommend([fast, zero])
    assert rec.chosen is fast
    assert rec.unshown == []  # cheaper, but shown slower: nothing to settle


def test_a_cheaper_setting_too_scattered_to_settle_is_done_not_measured_on() -> None:
    """5% slower at the median, 0% to 10% by round: at that scatter six rounds could not
    show it within 2% of the fastest, so another round is not worth it; three more rounds at
    5-6% slower show it slower."""
    from hydra_plugins.loadertune_sweeper.verdict._confidence import next_round
    from loadertune import decision

    fast = _cand(6, [1.0, 1.0, 1.0])
    cheaper = _cand(5, [1.0, 1.05, 1.10])
    step = next_round([fast, cheaper], least=3, most=6, cpus=2)
    assert step.measure == [] and step.leave == [(cheaper, decision.STUCK)]
    assert step.why == "too close to call in the rounds allowed"
    fast.values += [1.0, 1.0, 1.0]
    cheaper.values += [1.05, 1.06, 1.05]
    assert next_round([fast, cheaper], 3, 12, 2).leave == [(cheaper, decision.SLOWER)]
    assert _candidates.recommend([fast, cheaper]).chosen is fast


@pytest.mark.parametrize(("n", "k"), [(2, 1), (3, 1), (5, 1), (6, 2), (9, 3), (12, 4)])
def test_median_interval_narrows_with_more_rounds(n: int, k: int) -> None:
    values = [float(i) for i in range(1, n + 1)]
    assert paired_stats.median_interval(values) == (k, n - k + 1)


def test_rounds_pair_up_when_a_repeat_failed() -> None:
    fast = _cand(4, [1.0, 1.4])
    fast.rounds = [0, 2]  # round 1 failed
    other = _cand(2, [1.02, 9.0, 1.43])
    assert paired_stats.paired(other.by_round, fast.by_round) == pytest.approx([1.02, 1.43 / 1.4])


def test_candidates_are_the_top_and_the_baselines() -> None:
    trials = [_trial(0, 3.0, "default"), _trial(1, 1.0), _trial(2, 2.0), _trial(3, 1.5)]
    for number, t in enumerate(trials):
        t.number = number
    got = _candidates.candidates(trials, top=2)
    assert [(c.workers, c.labels) for c in got] == [
        (0, ["default (0 workers)"]),
        (1, ["top 1"]),
        (3, ["top 2"]),
    ]


def test_the_doubling_path_stands_in_the_verdict_at_the_rung_it_ends_at() -> None:
    # Start at 2, then 4 (the rule of thumb too), 8, 16 (each 2% faster), 20 (no faster):
    # the advice ends at 16, so 8 is not measured again for it, and 4 only as the rule.
    rows = [(0, 4.6, "default"), (2, 2.3, "start_small"), (4, 1.2, "rule_of_thumb")]
    rows += [(4, 1.2, "doubling"), (8, 0.81, "doubling"), (16, 0.70, "doubling")]
    rows += [(20, 0.69, "doubling"), (13, 0.68, None), (10, 0.71, None)]
    wide = {"loader.num_workers": IntDistribution(0, 20)}
    trials = [
        create_trial(
            params={"loader.num_workers": w},
            distributions=wide,
            value=v,
            user_attrs={"baseline": role} if role else {},
        )
        for w, v, role in rows
    ]
    for number, t in enumerate(trials):
        t.number = number
    trials[3].user_attrs["repeat_of"] = 2  # the rung at 4 answered from the rule of thumb
    assert _baselines.doubling_stop(trials) == 16
    got = {c.workers: c.labels for c in _candidates.candidates(trials, top=2)}
    assert got == {
        0: ["default (0 workers)"],
        2: ["start at 2"],
        4: ["rule of thumb (4 x CPUs, capped)"],
        16: ["doubling path"],
        20: ["top 2"],
        13: ["top 1"],
    }
    assert _baselines.doubling_stop(trials[:3]) == 2  # the start alone: the path ends there
    assert _baselines.doubling_stop(trials[:1]) is None


def test_loader_yaml_round_trips() -> None:
    from omegaconf import OmegaConf

    text = loader_yaml(
        {"num_workers": 2, "prefetch_factor": None, "pin_memory": False}, ["made by a test"]
    )
    assert text.startswith("# made by a test\n")
    assert OmegaConf.to_container(OmegaConf.create(text)) == {
        "num_workers": 2,
        "prefetch_factor": None,
        "pin_memory": False,
    }


GUESS = {
    "load_ms_per_batch": 40.0,
    "step_ms": 10.0,
    "batch_size": 32,
    "cpu_share_of_loading": 0.9,
    "usable_cpus": 8,
    "memory_per_worker_mb": 100.0,
    "memory_budget_mb": 10_000.0,
    "max_workers": 16,
}


@pytest.mark.parametrize(
    ("change", "workers", "bound"),
    [
        ({}, 4, "hides loading"),  # 40 ms of loading over a 10 ms step: 4 in parallel
        # CPU-bound decoding: 36 ms of CPU a batch over 2 CPUs is 18 ms a batch at best,
        # which 3 workers reach (2 would take 20).
        ({"usable_cpus": 2}, 3, "cpus"),
        # A step on the CPU that keeps both cores busy: (40 + 2 x 54) / 2 = 74 ms a batch at
        # best, which one worker already reaches.
        (
            {"usable_cpus": 2, "cpu_share_of_loading": 1.0, "step_ms": 54.0, "step_cpu_cores": 2.0},
            1,
            "cpus",
        ),
        # Loading takes under 5% of the step: no worker is worth starting.
        ({"load_ms_per_batch": 0.4}, 0, "loading is negligible"),
        ({"usable_cpus": 2, "cpu_share_of_loading": 0.1}, 4, "hides loading"),  # I/O waits
        ({"load_ms_per_batch": 400.0, "cpu_share_of_loading": 0.1}, 16, "search space"),
        ({"memory_per_worker_mb": 4_000.0}, 2, "memory"),
        ({"load_ms_per_batch": 2.0}, 1, "hides loading"),
    ],
)
def test_model_based_guess(change: dict[str, float], workers: int, bound: str) -> None:
    from loadertune.decision import guess

    g = guess(**{**GUESS, **change})  # type: ignore[arg-type]
    assert (g.workers, g.bound) == (workers, bound)
    cpus = change.get("usable_cpus", 8)
    cpu_floor = (g.load_ms_per_batch * g.cpu_share_of_loading + g.step_ms * g.step_cpu_cores) / cpus
    per_batch = (
        max(g.step_ms, g.load_ms_per_batch / g.workers, cpu_floor)
        if g.workers
        else g.load_ms_per_batch + g.step_ms
    )
    assert g.time_per_sample_ms == pytest.approx(per_batch / 32)


@pytest.mark.parametrize(
    ("change", "space", "searched"),
    [
        # I/O-bound: 400 / (10 x 1.05) -> 39 workers needed, the CPUs do not bound waiting
        # workers; 1.5 x 39 -> 59, within what memory (10_000 / 100 = 100) and the cap allow.
        ({"load_ms_per_batch": 400.0, "cpu_share_of_loading": 0.1, "max_workers": 64}, 4, 59),
        # ... within what memory allows: 10_000 / 2_000 = 5 workers, so the range is 0..5.
        (
            {
                "load_ms_per_batch": 400.0,
                "cpu_share_of_loading": 0.1,
                "memory_per_worker_mb": 2_000.0,
                "max_workers": 64,
            },
            4,
            5,
        ),
        # CPU-bound decoding on 2 CPUs: the CPUs bound the guess, the range stays as written.
        ({"usable_cpus": 2}, 4, 4),
        # One worker hides loading: no point in searching up to 16; 2 x 1 brackets the guess.
        ({"load_ms_per_batch": 2.0}, 16, 2),
        # Four workers hide loading in a 0..6 range: 2 x 4 = 8 is not narrower.
        ({}, 6, 6),
    ],
)
def test_guess_sets_the_workers_range(change: dict[str, float], space: int, searched: int) -> None:
    from hydra_plugins.loadertune_sweeper.plan._guess import workers_range
    from loadertune.decision import guess

    g = guess(**{**GUESS, **change})  # type: ignore[arg-type]
    assert workers_range(g, 0, space) == (0, searched)


def test_ranges_stay_on_the_step_and_guesses_snap_to_a_point() -> None:
    from optuna.distributions import CategoricalDistribution, IntDistribution

    from hydra_plugins.loadertune_sweeper.plan._baselines import nearest
    from hydra_plugins.loadertune_sweeper.plan._guess import workers_range
    from loadertune.decision import guess

    g = guess(**{**GUESS, "load_ms_per_batch": 70.0, "cpu_share_of_loading": 0.1})
    assert g.workers == 7
    assert workers_range(g, 0, 4, step=2) == (0, 10)  # 1.5 x 7 = 11, down to the step
    assert nearest(IntDistribution(0, 10, step=2), 7) == 6
    assert nearest(IntDistribution(0, 4), 9) == 4
    assert nearest(CategoricalDistribution([0, 2, 8]), 6) == 8


def test_terminal_verdict_fits_80_columns_and_says_everything(tmp_path: object) -> None:
    from pathlib import Path

    from rich.console import Console

    from hydra_plugins.loadertune_sweeper.plan._guess import WorkersRange
    from hydra_plugins.loadertune_sweeper.record._console import SweepView
    from loadertune.decision import Bound, Guess

    default = _cand(0, [2.0, 2.04, 1.96], roles=[Role.DEFAULT])
    thumb = _cand(6, [1.00, 1.02, 0.98], memory=900.0, roles=[Role.RULE_OF_THUMB])
    thumb.rank = 1
    chosen = _cand(2, [1.005, 1.026, 0.985], roles=[Role.START_SMALL])  # shown as fast
    chosen.rank = 2
    chosen.bottleneck = "cpu-bound loading"
    chosen.why = "decoding keeps 95% of the 2 usable CPUs busy."
    rec = _candidates.recommend([default, thumb, chosen])
    assert rec.chosen is chosen
    view = SweepView.__new__(SweepView)
    view.console = Console(width=80, record=True, force_terminal=False)
    view._asked_again = Counter()
    guess = Guess(
        workers=2,
        time_per_sample_ms=0.9,
        load_ms_per_batch=60.0,
        step_ms=20.0,
        cpu_share_of_loading=0.9,
        bound=Bound.CPUS,
    )
    ranged = WorkersRange("loader.num_workers", (0, 4, 1), 2)
    from hydra_plugins.loadertune_sweeper.verdict._confidence import assess

    assurance = assess(rec, [default, thumb, chosen], cpus=2, repeats=3)
    view.verdict(rec, [default, thumb, chosen], assurance, Path("best.yaml"), guess, ranged)
    text = view.console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    for phrase in (
        "Recommended: num_workers=2",
        "speed-up over default (0 workers): 1.99x",
        "What limits it: decoding",
        "num_workers=2 (bound: cpus)",
        "narrowed the num_workers search range from 0..4 to 0..2",
        "exported: best.yaml",
        f"Confidence: {assurance.level.value}.",
    ):
        assert phrase in " ".join(text.split()), phrase
    (row,) = [line for line in text.splitlines() if "│ recommended" in line]
    assert "workers=2" in row and "cpu-bound" in row
    # Fastest first: the rule of thumb's row comes before the default's.
    assert text.index("rule of") < text.index("default (0")
