"""The shared statistics: paired ratios, their noise, and what counts as within noise."""

from __future__ import annotations

import pytest

from loadertune import paired_stats


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
