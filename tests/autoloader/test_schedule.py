"""AutoLoader's choice from synthetic timings: the guess, the rounds, cheapest shown as fast,
confidence, a dropped probe, and the whole loop driven by a fake clock."""

from __future__ import annotations

from typing import Any

import pytest
from torch.utils.data import Dataset

from loadertune import AutoLoader
from loadertune.autoloader._decision import assess, decide, report_text
from loadertune.autoloader._schedule import (
    Measure,
    Segment,
    Setting,
    Tuner,
    candidates,
    guess_workers,
)
from loadertune.decision import recommend
from loadertune.measure._diagnosis import LABELS
from loadertune.measure._paired_stats import compare


@pytest.mark.parametrize(
    ("load_ms", "step_ms", "load_cpu", "cpus", "workers", "bound"),
    [
        (40.0, 10.0, 0.0, 2, 4, "hides loading"),  # reads: 4 workers overlap them
        (1.0, 50.0, 1.0, 2, 0, "loading is negligible"),  # compute-bound
        (40.0, 10.0, 1.0, 2, 2, "cpus"),  # decoding on 2 cores: (40 + 0) / 2 = 20 ms floor
        (900.0, 1.0, 0.0, 2, 16, "max_workers"),
    ],
)
def test_guess(
    load_ms: float, step_ms: float, load_cpu: float, cpus: int, workers: int, bound: str
) -> None:
    g = guess_workers(load_ms, step_ms, load_cpu, 0.0, cpus, cap=16)
    assert (g.workers, g.bound) == (workers, bound)


def test_candidates_around_the_guess() -> None:
    names = [s.name for s in candidates(4, 16, False, {})]
    assert names == ["w4", "w0", "w8", "w2", "w4_pf4"]
    assert [s.name for s in candidates(0, 16, False, {})] == ["w0", "w1", "w2", "w1_pf4"]
    assert "w4" in [s.name for s in candidates(4, 16, True, {})]  # unpinned beside pinned
    assert {s.pin_memory for s in candidates(4, 16, True, {})} == {True, False}
    fixed = candidates(4, 16, False, {"prefetch_factor": 8})
    assert {s.prefetch_factor for s in fixed if s.num_workers} == {8}


def io_bound(s: Setting, drift: float) -> float:
    """Seconds per batch: 40 ms loads on idle CPUs behind a 10 ms step, times the drift."""
    load = 0.040 if s.num_workers == 0 else 0.040 / s.num_workers
    extra = 0.010 if s.num_workers == 0 else 0.0
    return max(0.010, load) * drift + extra * drift


def measured(s: Setting, rnd: int, per_batch: float, steps: int) -> Measure:
    m = Measure(s, rnd, steps=steps, counted=steps, counted_s=per_batch * steps)
    m.wait_s = max(per_batch - 0.010, 0.0) * steps
    m.step_s = 0.010 * steps
    m.counted_wait_s = m.wait_s
    return m


def run(tuner: Tuner, timing: Any, fail: Setting | None = None) -> list[Segment]:
    """Feed the tuner synthetic measurements until it settles; return the segments run."""
    drifts = [1.0, 1.1, 0.95, 1.05]
    segments = []
    while (seg := tuner.next()) is not None:
        segments.append(seg)
        if seg.round < 0 and tuner.guess is None:
            m = Measure(seg.setting, -1, steps=seg.steps, counted=seg.steps - 1)
            m.counted_s = 0.050 * (seg.steps - 1)
            m.wait_s, m.step_s = 0.040 * seg.steps, 0.010 * seg.steps
            m.counted_wait_s = 0.040 * (seg.steps - 1)
            tuner.done(seg, m)
        elif seg.setting == fail:
            m = Measure(seg.setting, seg.round, steps=2, failed="worker(s) [1] exited")
            tuner.fail(seg, m, seg.steps - 2)
        else:
            per = timing(seg.setting, drifts[max(seg.round, 0) % len(drifts)])
            tuner.done(seg, measured(seg.setting, seg.round, per, seg.steps))
    return segments


def test_io_bound_settles_on_the_cheapest_that_hides_loading() -> None:
    tuner = Tuner(budget=200, cpus=2, max_workers=16)
    segments = run(tuner, io_bound)
    assert tuner.guess is not None and tuner.guess.workers == 4
    assert sum(s.steps for s in segments) <= 200
    rounds = [(s.setting.name, s.round) for s in segments if s.round >= 0]
    # The default ran first at 5x the predicted time: benched. Two workers, twice as slow
    # as the best in round 0, are left far behind; the rest alternate order round by round.
    assert rounds == [("w4", 0), ("w8", 0), ("w2", 0), ("w8", 1), ("w4", 1), ("w4", 2), ("w8", 2)]
    assert {s.name for s in tuner.far_behind} == {"w0", "w2"}
    d = decide(tuner, cpus=2)
    assert d.chosen.name == "w4" and d.chosen.persistent_workers
    assert d.assurance.level == "high"  # drift hit every setting alike within a round
    assert d.bottleneck in LABELS
    assert "chosen: w4" in report_text(d, tuner)


def test_a_benched_default_is_recalled_when_workers_do_not_help() -> None:
    tuner = Tuner(budget=200, cpus=2, max_workers=16)
    segments = run(tuner, lambda s, drift: 0.050 * drift)  # every setting as slow as the default
    assert ("w0", 1) in [(s.setting.name, s.round) for s in segments]
    # Recalled for the last round only, one round cannot show it as fast: the cheapest
    # setting the rounds did show as fast as the fastest stays (w2, two rounds alike).
    d = decide(tuner, 2)
    assert (d.chosen.name, d.ratio, d.may_cost) == ("w2", 1.0, 0.0)
    shown = recommend(tuner.compared(), {s: s.cost for s in tuner.compared()})
    assert [s.name for s in shown.unshown] == ["w0"]


def test_the_range_widens_when_the_most_workers_win() -> None:
    """More workers keep helping beyond the guess (say, other work shares the CPUs)."""
    tuner = Tuner(budget=200, cpus=2, max_workers=16)
    segments = run(tuner, lambda s, drift: 0.020 / max(s.num_workers, 1) * drift)
    assert ("w16", 1) in [(s.setting.name, s.round) for s in segments]
    assert decide(tuner, 2).chosen.name == "w16"
    assert sum(s.steps for s in segments) <= 200


def test_the_range_widens_only_where_another_round_still_fits() -> None:
    """A short budget (the benchmark's io loop: 201 steps, reads of 38 ms a batch behind a
    4.5 ms step): the most workers win round 0 by a hair. Twice as many again would make the
    next round too long for the budget; widening then would end the rounds after one, and
    one round cannot show the cheaper setting as fast, so the costlier would stay."""
    tuner = Tuner(budget=201, cpus=2, max_workers=64)
    first = tuner.next()
    assert first is not None and first.setting.num_workers == 0
    m = Measure(first.setting, -1, steps=first.steps, counted=first.steps - 1)
    m.counted_s, m.counted_wait_s = 0.0425 * (first.steps - 1), 0.038 * (first.steps - 1)
    m.wait_s, m.step_s = 0.038 * first.steps, 0.0045 * first.steps
    tuner.done(first, m)
    rounds: list[tuple[str, int]] = []
    while (seg := tuner.next()) is not None:
        rounds.append((seg.setting.name, seg.round))
        most = max(c.num_workers for c in tuner.cands)
        per = 0.0053 - (0.0001 if seg.setting.num_workers == most else 0.0)
        tuner.done(seg, measured(seg.setting, seg.round, per, seg.steps))
    assert len({r for _, r in rounds}) >= 2  # another round, not a decision on one
    assert tuner.spent <= 201
    assert not tuner.widened


def test_a_gap_shown_within_the_tolerance_goes_to_the_cheaper_setting() -> None:
    times = {"w2": {0: 1.01, 1: 1.30 * 1.01, 2: 0.8 * 1.01}, "w4": {0: 1.0, 1: 1.3, 2: 0.8}}
    choice = recommend(times, {"w2": 2.0, "w4": 4.0})
    assert (choice.chosen, choice.fastest) == ("w2", "w4")
    times["w2"] = {r: v * 1.10 for r, v in times["w4"].items()}
    assert recommend(times, {"w2": 2.0, "w4": 4.0}).chosen == "w4"


def test_paired_rounds_cancel_drift_and_scatter_lowers_confidence() -> None:
    steady = {"a": {0: 1.0, 1: 1.1, 2: 0.9}, "b": {0: 1.5, 1: 1.65, 2: 1.35}}
    assert compare(steady["b"], steady["a"])[0] == pytest.approx(1.5)
    choice = recommend(steady, {"a": 1.0, "b": 0.0})
    assert choice.chosen == "a" and assess(choice, steady).level == "high"
    drifting = {k: {0: v[0], 1: 2 * v[1], 2: v[2] / 2} for k, v in steady.items()}
    assert recommend(drifting, {"a": 1.0, "b": 0.0}).chosen == "a"  # the pairs still agree
    assert assess(choice, drifting).level == "low"  # but the machine's speed was not steady
    scattered = {"a": {0: 1.0, 1: 1.0, 2: 1.0}, "b": {0: 0.9, 1: 1.3, 2: 1.0}}
    choice = recommend(scattered, {"a": 1.0, "b": 2.0})
    assert assess(choice, scattered).level in ("medium", "low")


def test_a_failed_probe_is_dropped_and_its_steps_run_on_the_last_good_setting() -> None:
    tuner = Tuner(budget=200, cpus=2, max_workers=16)
    w8 = Setting(8, 2, True)
    segments = run(tuner, io_bound, fail=w8)
    after = segments[segments.index(next(s for s in segments if s.setting == w8)) + 1]
    assert after.round == -1 and after.setting.name == "w4"  # the setting that ran before it
    assert sum(1 for s in segments if s.setting == w8) == 1  # never probed again
    assert tuner.dropped[w8].startswith("worker")
    assert decide(tuner, 2).chosen.name == "w4"


def test_a_probe_failing_after_it_worked_is_not_its_own_recovery() -> None:
    """Two settings rotate A B, B A: B fails in round 1, right after its good round 0; the
    rest of its steps run on A, not on B again."""
    a, b = Setting(1, 2, True), Setting(2, 2, True)
    tuner = Tuner(budget=200, cpus=2, max_workers=16, forced=[a, b])
    for seg in (tuner.next(), tuner.next()):
        assert seg is not None and seg.round == 0
        tuner.done(seg, measured(seg.setting, 0, 0.02, seg.steps))
    seg = tuner.next()
    assert seg is not None and (seg.setting, seg.round) == (b, 1)
    tuner.fail(seg, Measure(b, 1, steps=2, failed="worker(s) [1] exited"), seg.steps - 2)
    recovery = tuner.next()
    assert recovery is not None and (recovery.setting, recovery.round) == (a, -1)


def test_tuner_state_round_trip() -> None:
    tuner = Tuner(budget=200, cpus=2, max_workers=16)
    run(tuner, io_bound, fail=Setting(8, 2, True))
    again = Tuner(budget=200, cpus=2, max_workers=16)
    again.restore(tuner.state())
    assert again.state() == tuner.state()
    assert decide(again, 2) == decide(tuner, 2)
    older = {k: v for k, v in tuner.state().items() if k != "far_behind"}
    older["raced"] = tuner.state()["far_behind"]  # the name checkpoints once saved it under
    again.restore(older)
    assert again.far_behind == tuner.far_behind != {}


def test_a_checkpoint_keeps_the_guess_as_its_figures() -> None:
    """The layout checkpoints already hold: the figures the guess came from, and what it gave."""
    tuner = Tuner(budget=200, cpus=2, max_workers=16)
    run(tuner, io_bound)
    saved = tuner.state()["guess"]
    assert saved == {
        "workers": 4,
        "load_ms": pytest.approx(40.0),
        "step_ms": pytest.approx(10.0),
        "load_cpu": 0.0,
        "step_cpu": 0.0,
        "bound": "hides loading",
        "cpus": 2,
    }
    again = Tuner(budget=200, cpus=2, max_workers=16)
    again.restore({**tuner.state(), "guess": {**saved, "load_ms": 90.0}})
    assert again.guess is not None and again.guess.workers == 9  # given again by its figures
    assert again.guess.time_per_sample_ms == pytest.approx(10.0)  # per batch


def test_too_small_a_budget_keeps_the_guess() -> None:
    tuner = Tuner(budget=20, cpus=2, max_workers=16)
    run(tuner, io_bound)
    d = decide(tuner, 2)
    assert d.chosen.num_workers == 4 and d.assurance.level == "low"


class Ints(Dataset[int]):
    def __len__(self) -> int:
        return 96

    def __getitem__(self, i: int) -> int:
        return i


class FakeClock:
    """Advances by a cost per call that depends on the workers of the probe delivering:
    the live one, or the one whose tail of batches in flight arrives before it."""

    def __init__(self, cost_by_workers: dict[int, float]) -> None:
        self.t, self.cost = 0.0, cost_by_workers
        self.loader: Any = None

    def __call__(self) -> float:
        d = self.loader._driver if self.loader else None
        probe = (d.leaving.probe if d.leaving else d.probe) if d else None
        self.t += self.cost[probe.setting.num_workers] if probe else 0.0
        return self.t


@pytest.mark.parametrize(
    ("costs", "chosen"),
    [
        ({0: 0.003, 1: 0.001, 2: 0.001}, 1),  # 1 and 2 workers tie: the cheaper
        ({0: 0.001, 1: 0.001, 2: 0.001}, 0),  # all tie: the default
        ({0: 0.004, 1: 0.002, 2: 0.001}, 2),  # the fastest, clearly
    ],
)
def test_the_loop_chooses_from_its_clock(costs: dict[int, float], chosen: int) -> None:
    """The whole loop, timed by a fake clock: the choice follows the timings."""
    clock = FakeClock(costs)
    loader = AutoLoader(
        Ints(), batch_size=2, tune_steps=90, clock=clock, probe_timeout_s=5,
        candidates=[{"num_workers": 0}, {"num_workers": 1}, {"num_workers": 2}],
    )  # fmt: skip
    clock.loader = loader
    for _ in range(3):
        assert [int(i) for b in loader for i in b] == list(range(96))
    assert loader.settings["num_workers"] == chosen


@pytest.mark.parametrize("workers", [0, 1, 4, 8, 16, 32])
def test_memory_reads_cost_every_setting_the_same_share_of_its_steps(workers: int) -> None:
    """A read visits every process of the probe; spaced by them, reads cost each setting about
    one process visit per READ_STEPS_PER_PROCESS steps (every 4 steps, 16 workers paid 8.5x
    what the default paid), and the first read still comes at the workers' start-up."""
    from loadertune.autoloader._usage import (
        MEMORY_CHECK_EVERY,
        READ_STEPS_PER_PROCESS,
        memory_read_due,
    )

    steps = 2000
    reads = [s for s in range(1, steps + 1) if memory_read_due(s, workers)]
    assert reads[0] == MEMORY_CHECK_EVERY
    visits_per_step = len(reads) * (workers + 1) / steps
    assert visits_per_step <= 1.05 / READ_STEPS_PER_PROCESS
    if workers >= 2:  # the fewest processes read at the floor of every MEMORY_CHECK_EVERY steps
        assert visits_per_step >= 0.95 / READ_STEPS_PER_PROCESS


def test_the_label_reads_the_steady_waits_not_the_switch_in() -> None:
    from loadertune.autoloader._decision import _diagnose
    from loadertune.measure._diagnosis import COMPUTE_BOUND, IO_BOUND

    w1 = Setting(1, 2, True)
    # Three segments of a 25 ms step whose loading one worker hides: each segment's first
    # batches waited 20 ms for the worker's first load (the switch), the steady ones 1 ms.
    segs = []
    for r in range(3):
        m = Measure(w1, r, steps=15, counted=12, tree_cpu_s=0.05, peak_rss_mb=300.0)
        m.step_s = 0.025 * 15
        m.wait_s = 3 * 0.020 + 12 * 0.001
        m.counted_wait_s, m.counted_s = 12 * 0.001, 12 * 0.026
        segs.append(m)
    label, _, evidence = _diagnose(segs, w1, cpus=2)
    assert label == COMPUTE_BOUND and evidence["data_wait_fraction"] < 0.05
    # Too short for a steady cycle: the whole segments count, waits and all.
    for m in segs:
        m.counted, m.counted_s, m.counted_wait_s = 0, 0.0, 0.0
    assert _diagnose(segs, w1, cpus=2)[0] == IO_BOUND


def test_workers_queued_for_a_cpu_make_the_label_cpu_contended() -> None:
    from loadertune.autoloader._decision import _diagnose
    from loadertune.measure._diagnosis import CPU_CONTENDED, IO_BOUND

    w8 = Setting(8, 2, True)
    m = Measure(w8, 0, steps=40, counted=30, tree_cpu_s=0.5, peak_rss_mb=900.0)
    m.wait_s, m.step_s = 40 * 0.010, 40 * 0.010  # waits half the time, CPUs not all busy
    m.counted_wait_s, m.counted_s = 30 * 0.010, 30 * 0.020
    assert _diagnose([m], w8, cpus=2)[0] == IO_BOUND  # no run-queue figures: waiting on reads
    m.queued_s = 3.0 * m.counted_s  # three of its processes queued, on average
    label, why, evidence = _diagnose([m], w8, cpus=2)
    assert label == CPU_CONTENDED and evidence["cpu_wait_procs"] == pytest.approx(3.0)
    assert "queued" in why or "CPU" in why
