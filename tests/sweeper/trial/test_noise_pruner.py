"""Pruning that survives noise, on synthetic reports: a setting within noise of the best is
kept, one clearly slower is pruned (the median pruner, on the same reports, prunes both)."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from hydra_plugins.loadertune_sweeper.trial._noise_pruner import (
    IntervalPruner,
    block_ms,
    hopeless,
)
from loadertune.measure._timing import StepRecord

optuna.logging.set_verbosity(optuna.logging.WARNING)

# The best trial's blocks (ms per sample): a shared machine's few percent of wander.
BEST = [1.00, 1.03, 0.98, 1.01, 0.99, 1.02]
WITHIN_NOISE = [1.03, 1.00, 1.05, 1.02]  # 2.5% slower at the median
FAR_SLOWER = [1.31, 1.29, 1.35, 1.30]  # 30% slower in every block


def _study(pruner: optuna.pruners.BasePruner) -> optuna.Study:
    study = optuna.create_study(pruner=pruner)
    best = study.ask()
    for i in range(1, len(BEST) + 1):  # the running mean, as the sweep reports it
        best.report(sum(BEST[:i]) / i, i * 5)
    best.set_user_attr("block_ms", BEST)
    study.tell(best, sum(BEST) / len(BEST))
    return study


def _should_prune(study: optuna.Study, blocks: list[float]) -> bool:
    trial = study.ask()
    trial.set_user_attr("block_ms", blocks)
    total = 0.0
    for i, value in enumerate(blocks, start=1):  # the running mean, as the sweep reports it
        total += value
        trial.report(total / i, step=i * 5)
    return trial.should_prune()


def test_a_setting_within_noise_of_the_best_is_not_pruned() -> None:
    assert not _should_prune(_study(IntervalPruner(n_startup_trials=1)), WITHIN_NOISE)


def test_a_setting_clearly_slower_than_the_best_is_pruned() -> None:
    assert _should_prune(_study(IntervalPruner(n_startup_trials=1)), FAR_SLOWER)


def test_the_median_pruner_prunes_a_setting_within_noise() -> None:
    # What the interval pruner replaces: one number against the best's, no room for noise.
    median = optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=10)
    assert _should_prune(_study(median), WITHIN_NOISE)


def test_no_pruning_before_the_warmup_or_with_too_few_blocks() -> None:
    study = _study(IntervalPruner(n_startup_trials=1, n_warmup_steps=30))
    assert not _should_prune(study, FAR_SLOWER)  # 20 steps reported, under the warm-up
    assert not _should_prune(_study(IntervalPruner(n_startup_trials=1)), FAR_SLOWER[:2])


def test_no_pruning_without_a_measured_best() -> None:
    study = optuna.create_study(pruner=IntervalPruner(n_startup_trials=1))
    repeat = study.ask()  # answered from another trial: not a best to prune against
    repeat.set_user_attr("block_ms", [0.1, 0.1, 0.1])
    repeat.set_user_attr("repeat_of", 7)
    study.tell(repeat, 0.1)
    assert not _should_prune(study, FAR_SLOWER)
    assert study.trials[0].state == TrialState.COMPLETE


def test_the_best_is_read_once_per_running_trial_not_at_every_report() -> None:
    """Reading every complete trial was half a report's cost beside the trial being timed."""
    study = _study(IntervalPruner(n_startup_trials=1))
    reads = []
    real = study.get_trials

    def counted(*args: object, **kwargs: object) -> object:
        reads.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    study.get_trials = counted  # type: ignore[method-assign]
    for number in (1, 2):
        trial = study.ask()
        blocks = WITHIN_NOISE * 2
        for i in range(1, len(blocks) + 1):  # each report asks, as the sweep does
            trial.set_user_attr("block_ms", blocks[:i])
            trial.report(sum(blocks[:i]) / i, step=i * 5)
            assert not trial.should_prune()
        assert len(reads) == number  # from the first report with enough blocks on
        study.tell(trial, state=TrialState.PRUNED)


def test_the_tolerance_sets_how_far_above_the_interval_must_lie() -> None:
    assert hopeless([1.10, 1.12, 1.11], BEST, tolerance=0.05)
    assert not hopeless([1.10, 1.12, 1.11], BEST, tolerance=0.10)


def test_bad_options_name_the_key() -> None:
    with pytest.raises(ValueError, match=r"hydra\.sweeper\.pruner"):
        IntervalPruner(min_blocks=2)


def _steps(ms: list[float], samples: int = 4) -> list[StepRecord]:
    out, t = [], 0.0
    for i, step in enumerate(ms):
        end = t + step / 1000
        out.append(StepRecord(i, t, step / 2000, 0.0, step / 2000, end, samples))
        t = end
    return out


def test_blocks_are_whole_and_at_least_two_arrival_cycles() -> None:
    steps = _steps([4.0] * 23)
    assert block_ms(steps, num_workers=0, report_every=5) == pytest.approx([1.0] * 4)
    assert len(block_ms(steps, num_workers=6, report_every=5)) == 1  # blocks of 12 steps


def test_by_default_three_measured_trials_come_before_any_pruning() -> None:
    study = _study(IntervalPruner())
    assert not _should_prune(study, FAR_SLOWER)  # one measured trial: not yet
    for _ in range(2):
        best = study.ask()
        best.set_user_attr("block_ms", BEST)
        study.tell(best, 1.0)
    assert _should_prune(study, FAR_SLOWER)
