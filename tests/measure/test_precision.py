"""When a timed window has measured enough: block intervals on synthetic step series."""

from __future__ import annotations

import random

import pytest

from loadertune.checks._validation import validate_trial
from loadertune.config._typed import TrialConfig
from loadertune.errors import ConfigError
from loadertune.measure._precision import (
    MAX_STEPS_FACTOR,
    MIN_BLOCKS,
    StopRule,
    block_rates,
    rate_ci,
    relative_half_width,
    steps_for_tail,
    t975,
)
from loadertune.measure._timing import StepRecord, summarize


def steps(phases: list[tuple[float, float]], samples: int = 10) -> list[StepRecord]:
    """Back-to-back steps of (wait, compute) seconds, each of ``samples`` samples."""
    records, t = [], 100.0
    for i, (wait, compute) in enumerate(phases):
        end = t + wait + compute
        records.append(StepRecord(i, t, wait, 0.0, compute, end, samples))
        t = end
    return records


def test_half_width_by_hand() -> None:
    # Mean 3, sample s.d. sqrt(2.5), 5 blocks: t(4) = 2.776; 2.776 * sqrt(2.5 / 5) / 3.
    assert relative_half_width([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(
        2.776 * (2.5 / 5) ** 0.5 / 3
    )
    assert relative_half_width([2.0] * 7) == 0.0
    assert relative_half_width([1.0, 2.0, 3.0, 4.0]) is None  # fewer than 5 blocks
    assert relative_half_width([0.0] * 5) is None


def test_t_quantiles_shrink_towards_the_normal() -> None:
    values = [t975(df) for df in range(1, 200)]
    assert values == sorted(values, reverse=True)
    assert t975(4) == pytest.approx(2.776)
    assert t975(11) == pytest.approx(2.228)  # the next lower tabulated df: never narrower
    assert t975(500) == pytest.approx(1.96)
    with pytest.raises(ValueError, match="degree of freedom"):
        t975(0)


def test_steady_steps_are_known_at_once() -> None:
    records = steps([(0.001, 0.009)] * 40)
    rates = block_rates(records, num_workers=0)
    assert len(rates) == 10
    assert rates == pytest.approx([1.0] * 10)  # 10 ms a step of 10 samples
    assert rate_ci(records, num_workers=0) == pytest.approx(0.0, abs=1e-9)
    assert StopRule.for_trial(40, None, 0.02, 0).sure(records)


def test_too_few_cycles_say_nothing_yet() -> None:
    records = steps([(0.001, 0.009)] * (MIN_BLOCKS - 1))
    assert rate_ci(records, num_workers=0) is None
    rule = StopRule.for_trial(2, 32, 0.5, 0)
    assert not rule.sure(records)


def test_noisy_steps_need_more_than_steady_ones() -> None:
    rng = random.Random(0)
    noisy = steps([(rng.uniform(0.0, 0.02), 0.01) for _ in range(200)])
    rule = StopRule.for_trial(40, 320, 0.02, 0)
    assert not rule.sure(noisy[:40])
    ci_40, ci_200 = rate_ci(noisy[:40], 0), rate_ci(noisy, 0)
    assert ci_40 is not None and ci_200 is not None
    assert ci_200 < ci_40  # more steps, a narrower interval


def test_blocks_follow_whole_arrival_cycles() -> None:
    # Four workers in lock-step: one step waits 90 ms for a burst of 4 batches, the next
    # three find theirs ready. Single steps vary 10x, whole cycles not at all.
    cycle = [(0.09, 0.01)] + [(0.0, 0.01)] * 3
    records = steps(cycle[1:] + cycle * 12)  # opens inside a burst
    rates = block_rates(records, num_workers=4)
    assert len(rates) == 10
    assert rates == pytest.approx([130 / 40] * 10)
    assert rate_ci(records, num_workers=4) == pytest.approx(0.0, abs=1e-9)
    assert summarize(records, 4).time_per_sample_ms == pytest.approx(130 / 40)
    # Taken step by step instead, the bursts look like noise.
    ci_steps = rate_ci(records, num_workers=0)
    assert ci_steps is not None and ci_steps > 0.1


def test_rule_bounds_and_checks() -> None:
    rule = StopRule.for_trial(40, None, 0.02, 2)
    assert (rule.min_steps, rule.max_steps) == (40, MAX_STEPS_FACTOR * 40)
    assert rule.next_check(40) == 44  # a tenth more
    assert rule.next_check(5) == 40  # never before the minimum
    assert rule.next_check(MAX_STEPS_FACTOR * 40 - 1) == MAX_STEPS_FACTOR * 40  # never past the cap
    fixed = StopRule.for_trial(40, 100, None, 2)  # no precision asked: exactly steps
    assert (fixed.min_steps, fixed.max_steps) == (40, 40)
    rng = random.Random(1)
    noisy = steps([(rng.uniform(0.0, 0.05), 0.01) for _ in range(40)])
    assert not StopRule.for_trial(4, 100, 0.001, 0).sure(noisy)
    assert StopRule.for_trial(4, 40, 0.001, 0).sure(noisy)  # the cap, sure or not


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"max_steps": 10}, r"^trial\.max_steps=10: must be >= trial\.steps \(40\)"),
        ({"precision": 0.0}, r"^trial\.precision=0\.0: must be in \(0, 1\)"),
        ({"precision": 1.5}, r"^trial\.precision=1\.5: .*trial\.precision=0\.02"),
    ],
)
def test_bad_precision_settings_name_the_key_and_the_fix(
    change: dict[str, float], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_trial(TrialConfig(**change))  # type: ignore[arg-type]


def test_good_precision_settings_pass() -> None:
    validate_trial(TrialConfig(max_steps=40))
    validate_trial(TrialConfig(precision=None))
    validate_trial(TrialConfig(precision=0.05, max_steps=None))


def test_a_stalling_setting_is_timed_over_enough_of_its_stalls() -> None:
    # 25 long waits per 1000 steps: 10 of them take 400 steps, capped at max_steps = 120.
    assert steps_for_tail(25.0, 40, 120) == 120
    assert steps_for_tail(125.0, 40, 120) == 80  # 10 / 0.125
    assert steps_for_tail(500.0, 40, 120) == 40  # 20 in 40 steps already: trial.steps
    assert steps_for_tail(0.0, 40, 120) == 40  # never stalled
    assert steps_for_tail(float("nan"), 40, 120) == 40


def test_the_tail_of_the_wait_shows_what_the_median_hides() -> None:
    # 100 steps of a 20 ms step: 95 batches ready (0.1 ms), 5 held by a 120 ms stall.
    phases = [(0.120 if i % 20 == 7 else 0.0001, 0.020) for i in range(100)]
    s = summarize(steps(phases), num_workers=8)
    assert s.data_wait_ms_p50 == pytest.approx(0.1)
    assert s.data_wait_ms_max == pytest.approx(120.0)
    assert s.data_wait_ms_p99 > 100.0
    assert s.long_waits_per_1000_steps == pytest.approx(50.0)
    # The rate counts the stalls: 100 steps of 20 ms plus 5 of 120 ms over 1000 samples.
    assert s.time_per_sample_ms == pytest.approx((100 * 20.01 + 5 * 120) / 1000, rel=0.02)
    quiet = summarize(steps([(0.0001, 0.020)] * 100), num_workers=8)
    assert quiet.long_waits_per_1000_steps == 0.0 and quiet.data_wait_ms_max < 1.0
