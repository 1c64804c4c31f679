"""The shared statistics: paired ratios, their noise, what counts as shown as fast, and how
many rounds would settle a pair."""

from __future__ import annotations

import pytest

from loadertune.measure import _paired_stats as paired_stats


def test_ratios_pair_only_the_rounds_both_were_measured_in() -> None:
    a = {0: 1.1, 1: 2.2, 3: 3.3}
    b = {0: 1.0, 1: 2.0, 2: 9.0}
    assert paired_stats.paired(a, b) == pytest.approx([1.1, 1.1])
    assert paired_stats.compare(a, b) == pytest.approx((1.1, 1.1, 1.1))
    assert paired_stats.measured_noise(a, b) == 0.0  # two equal ratios: no noise, no floor


def test_without_shared_rounds_the_repeats_extremes_and_spread_decide() -> None:
    assert paired_stats.compare({0: 1.0, 1: 1.2}, {5: 1.0}) == pytest.approx((1.1, 1.0, 1.2))
    assert paired_stats.measured_noise({0: 1.0, 1: 1.2}, {5: 1.0}) == pytest.approx(0.2 / 1.1)


def test_one_shared_round_gives_its_own_ratio_within_the_repeats_extremes() -> None:
    # The machine ran 20% slow in round 0, the one round the slow setting was measured in:
    # its ratio there is 2.0, where its time over the other's median would say 1.8.
    slow = {0: 2.4}
    fast = {0: 1.2, 1: 1.0, 2: 1.0}
    assert paired_stats.compare(slow, fast) == pytest.approx((2.0, 2.0, 2.4))


def test_shown_as_fast_needs_the_intervals_top_within_the_tolerance() -> None:
    fastest = {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0}
    tight = {0: 1.005, 1: 1.0, 2: 1.01, 3: 1.005}  # 0.5% slower, hardly scattered
    assert paired_stats.shown_as_fast(tight, fastest)
    # Not told apart is not shown as fast: 0.5% slower at the median, but scattered by 10%.
    loose = {0: 1.05, 1: 0.95, 2: 1.06, 3: 0.96}
    assert paired_stats.compare(loose, fastest)[0] == pytest.approx(1.005)
    assert not paired_stats.shown_as_fast(loose, fastest)
    # A scatter all settings show together counts too, though this pair agrees by luck.
    assert not paired_stats.shown_as_fast(tight, fastest, pooled_sd=0.05, df=12)
    assert not paired_stats.shown_as_fast({0: 1.0}, {0: 1.0})  # one round shows nothing
    assert not paired_stats.shown_as_fast({0: 1.03, 1: 1.03, 2: 1.03}, fastest)  # 3% slower


def test_rounds_to_settle_a_pair_at_the_scatter_it_shows() -> None:
    fastest = {r: 1.0 for r in range(3)}
    near = {0: 1.01, 1: 1.0, 2: 1.015}  # about 1% slower, scatter under 1%: settles soon
    settle = paired_stats.rounds_to_settle(near, fastest, most=6)
    assert settle is not None and 3 <= settle <= 6
    # 2% slower, right at the tolerance: no number of rounds tells which side it is on.
    edge = {0: 1.01, 1: 1.03, 2: 1.02}
    assert paired_stats.rounds_to_settle(edge, fastest, most=6) is None
    # Far slower: settled already, at the rounds it has.
    assert paired_stats.rounds_to_settle({0: 1.3, 1: 1.32, 2: 1.31}, fastest, most=6) == 3
    # A wide pooled scatter pushes the rounds needed past what is allowed.
    assert paired_stats.rounds_to_settle(near, fastest, most=6, pooled_sd=0.2, pooled_df=8) is None


def test_the_pooled_fit_uses_every_round_two_settings_share() -> None:
    """A setting that left the race after two rounds adds its rounds to the fit."""
    a = {0: 1.0, 1: 1.1, 2: 0.9, 3: 1.0}
    b = {r: 2 * t for r, t in a.items()}  # exactly twice a's time in every round: no scatter
    sd, df = paired_stats.pooled_log_sd({"a": a, "b": b})
    assert (sd, df) == (pytest.approx(0.0, abs=1e-12), 3)
    c = {0: 1.5, 1: 1.5}  # left after two rounds, flat while the machine moved
    sd, df = paired_stats.pooled_log_sd({"a": a, "b": b, "c": c})
    assert df == 4 and sd > 0.03  # c did not follow the machine: scatter the pair alone hid
    assert paired_stats.pooled_log_sd({"a": a}) == (0.0, 0)


def test_a_rounds_gain_is_what_it_may_still_win_back() -> None:
    """Close and scattered: another round may well change the pick, so it is worth more
    than one of a pair far apart; and it is worth less the more rounds there are."""
    pick = {r: 1.0 for r in range(6)}
    close = {0: 0.97, 1: 1.04, 2: 0.99}  # about as fast as the pick, 3% of scatter
    far = {0: 1.30, 1: 1.34, 2: 1.29}
    assert paired_stats.round_gain(pick, close) > 10 * paired_stats.round_gain(pick, far)
    more = {**close, 3: 0.97, 4: 1.04, 5: 0.99}  # the same scatter over twice the rounds
    assert paired_stats.round_gain(pick, more) < paired_stats.round_gain(pick, close)
    assert paired_stats.round_gain(pick, {0: 1.0}) == float("inf")  # no scatter known yet
    assert paired_stats.round_gain(pick, {0: 1.0, 1: 1.0}) == 0.0  # two equal rounds
    # A scatter all settings show together makes the pair's next round worth more.
    assert paired_stats.round_gain(pick, close, pooled_sd=0.1) > paired_stats.round_gain(
        pick, close
    )
