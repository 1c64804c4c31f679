"""run_trial on the real configs, shrunk: real files, real workers, a real model step."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from loadertune import run_trial
from loadertune.config._typed import to_run_config
from loadertune.errors import ConfigError
from loadertune.measure._precision import MAX_STEPS_FACTOR, rate_ci
from tests.conftest import Compose


def test_default_trial_measures_the_timed_window(compose: Compose) -> None:
    seen: list[bool] = []
    config = to_run_config(compose(["trial.precision=null"]))  # exactly trial.steps
    result = run_trial(config, on_step=lambda r, timed: seen.append(timed))
    s = result.summary
    assert s.steps == 4
    assert s.samples == 16
    assert len(result.steps) == 4
    assert s.time_per_sample_ms == pytest.approx(s.window_s * 1000 / 16)
    assert s.window_s >= sum(r.step_s for r in result.steps) * 0.999
    # One untimed first batch, then one warm-up step, then the timed steps.
    assert seen == [False, True, True, True, True]
    assert result.first_batch_s > 0
    assert result.peak_memory_mb > 50
    assert result.effective_loader.num_workers == 0
    assert result.start_method == "none"
    assert result.machine["usable_cpus"] >= 1
    assert result.metrics()["time_per_sample_ms"] == s.time_per_sample_ms
    assert result.rate_ci_pct is None  # 4 steps are too few blocks to say
    assert "rate_ci_pct" not in result.metrics()
    assert result.other_cpu_percent >= 0.0 and result.steal_percent >= 0.0
    assert {"other_cpu_percent", "steal_percent"} <= set(result.metrics())
    # The sampler process read memory at least once (at the end) and CPU in every sample.
    assert any(r.memory_bytes is not None for r in result.resources)
    assert all(r.cpu_percent >= 0.0 for r in result.resources)


def test_timing_goes_on_until_the_rate_is_known(compose: Compose) -> None:
    # trial.steps=4 is the least; the rate's 95% interval within 2% stops it, and
    # MAX_STEPS_FACTOR x 4 at most. How many depends on the machine; what holds whatever it
    # is does not.
    result = run_trial(to_run_config(compose(["model=simulated", "model.step_ms=2"])))
    s = result.summary
    cap = MAX_STEPS_FACTOR * 4
    assert 4 <= s.steps <= cap
    assert s.samples == 4 * s.steps
    assert not result.truncated
    assert result.metrics()["timed_steps"] == s.steps
    if s.steps < cap:  # stopped early: only because the rate was known well enough
        assert result.rate_ci_pct is not None and result.rate_ci_pct <= 2.0
    if result.rate_ci_pct is not None:
        assert result.rate_ci_pct == pytest.approx(100 * (rate_ci(result.steps, 0) or 0.0))
        assert result.metrics()["rate_ci_pct"] == result.rate_ci_pct


def test_an_unreachable_precision_stops_at_max_steps(compose: Compose) -> None:
    overrides = ["model=simulated", "model.step_ms=1", "trial.max_steps=12"]
    config = to_run_config(compose([*overrides, "trial.precision=0.000001"]))
    result = run_trial(config)
    assert result.summary.steps == 12
    assert not result.truncated
    assert result.rate_ci_pct is not None and result.rate_ci_pct > 0.0001


def test_warm_up_consumes_the_loaders_look_ahead(compose: Compose) -> None:
    # Three workers with 2 batches each in flight: the first batch and six warm-up steps take
    # the look-ahead before the clock starts, though trial.warmup_steps asks for none.
    seen: list[bool] = []
    config = to_run_config(
        compose(
            [
                "model=simulated",
                "model.step_ms=1",
                "loader.num_workers=3",
                "loader.prefetch_factor=2",
                "trial.warmup_steps=0",
                "trial.precision=null",
            ]
        )
    )
    result = run_trial(config, on_step=lambda r, timed: seen.append(timed))
    assert seen == [False] * 6 + [True] * 4
    assert result.warmup_steps == 6
    assert result.metrics()["warmup_steps"] == 6
    asked_more = to_run_config(compose(["loader.num_workers=0", "trial.warmup_steps=2"]))
    assert run_trial(asked_more).warmup_steps == 2


def test_generated_dataset_is_cached_on_disk(compose: Compose, tmp_path: Path) -> None:
    run_trial(to_run_config(compose([])))
    folders = list((tmp_path / "datasets").iterdir())
    assert len(folders) == 1
    assert (folders[0] / "COMPLETE").exists()
    assert len(list(folders[0].glob("class_*/*.jpg"))) == 48
    stamp = (folders[0] / "COMPLETE").stat().st_mtime
    run_trial(to_run_config(compose([])))
    assert (folders[0] / "COMPLETE").stat().st_mtime == stamp


def test_workers_are_real_processes_and_counted(compose: Compose) -> None:
    config = to_run_config(
        compose(["model=simulated", "model.step_ms=5", "loader.num_workers=2", "trial.steps=8"])
    )
    # Earlier tests may leave helpers (a forkserver, a resource tracker) under this process.
    already = len(psutil.Process().children(recursive=True))
    result = run_trial(config)
    assert result.effective_loader.num_workers == 2
    assert result.start_method == "fork"
    # The sampler's last sample is taken with the workers alive; it leaves itself out.
    assert max(s.processes for s in result.resources) == 1 + already + 2
    # A 5 ms sleep is never shorter; how much longer depends on the machine.
    assert min(r.compute_s for r in result.steps) >= 0.0049
    assert result.summary.compute_ms_mean >= 4.9


def test_spawn_start_method_works(compose: Compose) -> None:
    config = to_run_config(
        compose(["loader.num_workers=1", "loader.multiprocessing_context=spawn", "model=mlp"])
    )
    result = run_trial(config)
    assert result.start_method == "spawn"
    assert result.summary.samples == 4 * result.summary.steps >= 16


def test_steps_beyond_the_dataset_read_it_again_in_one_stream(compose: Compose) -> None:
    # 48 images / 4 per batch = 12 batches a pass; 2 + 20 steps read it twice, in one epoch
    # of the loader, so the workers never run dry inside the timed window.
    result = run_trial(
        to_run_config(
            compose(
                [
                    "trial.steps=20",
                    "trial.precision=null",
                    "model=simulated",
                    "model.step_ms=0",
                    "loader.num_workers=2",
                ]
            )
        )
    )
    assert result.epochs == 1
    assert result.summary.steps == 20
    assert result.summary.samples == 80


def test_stream_is_whole_shuffled_passes() -> None:
    import torch

    from loadertune.measure._steady_state import stream_sampler

    stream = stream_sampler(5, 12, shuffle=True, generator=torch.Generator().manual_seed(0))
    order = list(stream)
    assert len(order) == len(stream) == 12
    assert sorted(order[:5]) == sorted(order[5:10]) == list(range(5))
    assert order[:5] != order[5:10]  # each pass is shuffled anew
    in_order = stream_sampler(3, 7, shuffle=False, generator=None)
    assert list(in_order) == [0, 1, 2, 0, 1, 2, 0]
    assert len(in_order) == 7


def test_custom_dataset_class_outside_the_package(compose: Compose, fixtures_on_path: Path) -> None:
    config = to_run_config(
        compose(
            [
                "dataset=custom",
                "dataset._target_=user_data.RandomVectors",
                "+dataset.length=40",
                "+dataset.dim=6",
                "model=mlp",
            ]
        )
    )
    result = run_trial(config)
    assert result.summary.samples == 4 * result.summary.steps >= 16


def test_model_that_cannot_take_the_samples_names_both(
    compose: Compose, fixtures_on_path: Path
) -> None:
    config = to_run_config(
        compose(["dataset=custom", "dataset._target_=user_data.RandomVectors", "model=small_cnn"])
    )
    with pytest.raises(ConfigError, match=r"^model\.name=small_cnn: .*dataset=custom yields"):
        run_trial(config)


def test_time_limit_stops_the_window_and_says_so(compose: Compose) -> None:
    config = to_run_config(
        compose(
            ["model=simulated", "model.step_ms=50", "trial.steps=100", "trial.time_limit_s=0.2"]
        )
    )
    result = run_trial(config)
    assert result.truncated
    assert 2 <= result.summary.steps < 100
