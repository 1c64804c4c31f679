"""The step timer and summary, driven by a fake clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from loadertune.measure._timing import StepTimer, pace_setter, summarize


class FakeClock:
    """Returns the scripted instants in order."""

    def __init__(self, instants: list[float]) -> None:
        self._it: Iterator[float] = iter(instants)

    def __call__(self) -> float:
        return next(self._it)


def run_steps(phases: list[tuple[float, float, float]], samples: int = 10) -> StepTimer:
    """Drive a timer through steps of (wait, copy, compute) seconds, back to back."""
    instants: list[float] = []
    t = 100.0
    for wait, copy, compute in phases:
        instants += [t, t + wait, t + wait + copy, t + wait + copy + compute]
        t += wait + copy + compute
    timer = StepTimer(clock=FakeClock(instants))
    for _ in phases:
        timer.start()
        timer.batch_ready()
        timer.copied()
        timer.stepped(samples)
    return timer


def test_phases_are_recorded_per_step() -> None:
    timer = run_steps([(0.5, 0.1, 0.2), (0.0, 0.1, 0.2)])
    first, second = timer.records
    assert first.wait_s == pytest.approx(0.5)
    assert first.copy_s == pytest.approx(0.1)
    assert first.compute_s == pytest.approx(0.2)
    assert first.step_s == pytest.approx(0.8)
    assert second.index == 1
    assert second.step_s == pytest.approx(0.3)


def test_time_per_sample_is_window_over_samples_not_median_step() -> None:
    # Bursty arrivals: 9 quick steps, then one step that waits 1 s for the next burst.
    phases = [(0.0, 0.0, 0.01)] * 9 + [(1.0, 0.0, 0.01)]
    summary = summarize(run_steps(phases, samples=10).records)
    assert summary.samples == 100
    assert summary.window_s == pytest.approx(1.1)
    assert summary.time_per_sample_ms == pytest.approx(11.0)
    assert summary.samples_per_s == pytest.approx(100 / 1.1)
    # The median step (10 ms) would claim 1 ms a sample: 11x too optimistic.
    assert summary.step_time_ms_p50 == pytest.approx(10.0)
    assert summary.data_wait_fraction == pytest.approx(1.0 / 1.1)
    assert summary.data_wait_ms_p50 == pytest.approx(0.0)


def test_gaps_between_steps_count_in_the_window() -> None:
    timer = StepTimer(clock=FakeClock([0.0, 0.0, 0.0, 1.0, 5.0, 5.0, 5.0, 6.0]))
    for _ in range(2):
        timer.start()
        timer.batch_ready()
        timer.copied()
        timer.stepped(1)
    assert summarize(timer.records).window_s == pytest.approx(6.0)


def test_summary_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="no timed steps"):
        summarize([])


def test_rate_is_taken_over_whole_arrival_cycles() -> None:
    # Four workers in lock-step: one step waits 90 ms for a burst of 4 batches, then three
    # steps find theirs ready; each step computes 10 ms. A cycle is 130 ms for 4 batches.
    cycle = [(0.09, 0.0, 0.01)] + [(0.0, 0.0, 0.01)] * 3
    # A window that opens inside a burst: its first 3 batches were loaded before it began.
    phases = cycle[1:] + cycle * 3
    summary = summarize(run_steps(phases, samples=10).records)
    assert summary.steps == 15
    assert summary.window_s == pytest.approx(0.03 + 3 * 0.13)
    # The whole window would claim 150 samples in 0.42 s (2.8 ms a sample, 14% optimistic);
    # from the first long wait to the last, 2 whole cycles give the steady 40 per 130 ms.
    assert summary.samples == 150
    assert summary.cycle_window_s == pytest.approx(2 * 0.13)
    assert summary.cycle_samples == 80
    assert summary.time_per_sample_ms == pytest.approx(130 / 40)
    assert summary.samples_per_s == pytest.approx(40 / 0.13)


def test_steady_arrivals_use_the_whole_window() -> None:
    # Every step waits alike (one worker, slower than the step): no bursts to align to.
    summary = summarize(run_steps([(0.05, 0.0, 0.01)] * 6, samples=10).records)
    assert summary.cycle_window_s == pytest.approx(summary.window_s)
    assert summary.time_per_sample_ms == pytest.approx(6.0)


def test_cpu_of_the_training_process_is_split_into_waiting_and_stepping() -> None:
    # Two steps: wait 100 ms using 100 ms of CPU (loading in the process), then copy and
    # step 50 ms using 100 ms of CPU (two threads); the second waits 100 ms on I/O (no CPU).
    wall = FakeClock([0.0, 0.1, 0.1, 0.15, 0.15, 0.25, 0.25, 0.3])
    cpu = FakeClock([1.0, 1.1, 1.2, 1.2, 1.2, 1.3])
    timer = StepTimer(clock=wall, cpu_clock=cpu)
    for _ in range(2):
        timer.start()
        timer.batch_ready()
        timer.copied()
        timer.stepped(4)
    first, second = timer.records
    assert (first.wait_cpu_s, first.step_cpu_s) == pytest.approx((0.1, 0.1))
    assert (second.wait_cpu_s, second.step_cpu_s) == pytest.approx((0.0, 0.1))
    summary = summarize(timer.records)
    assert summary.wait_cpu_cores == pytest.approx(0.1 / 0.2)  # half a core while waiting
    assert summary.step_cpu_cores == pytest.approx(0.2 / 0.1)  # two cores while stepping


def test_one_producer_is_never_trimmed_to_cycles() -> None:
    # 0 or 1 workers: batches come one at a time, so an odd long wait is not a burst edge.
    phases = [(0.05, 0.0, 0.01)] * 3 + [(0.2, 0.0, 0.01)] + [(0.05, 0.0, 0.01)] * 3
    phases += [(0.2, 0.0, 0.01)] + [(0.05, 0.0, 0.01)] * 2
    records = run_steps(phases, samples=10).records
    assert summarize(records).cycle_samples < 100  # unknown workers: treated as bursts
    one = summarize(records, num_workers=0)
    assert one.cycle_samples == one.samples == 100
    assert one.time_per_sample_ms == pytest.approx(one.window_s * 1000 / 100)


def test_the_pace_setter_is_the_rank_with_the_longest_window() -> None:
    """One rule for every node figure: the trial's, the diagnosis's, AutoLoader's segments."""
    windows = {0: 2.0, 1: 3.5, 2: 3.0}
    assert pace_setter(windows, lambda r: windows[r]) == 1
    tied = [(0, 3.0, 0.1), (1, 3.0, 0.4), (2, 1.0, 0.9)]  # equal windows: the more starved
    assert pace_setter(tied, lambda r: (r[1], r[2]))[0] == 1
