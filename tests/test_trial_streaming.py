"""A user's own IterableDataset in a trial: streamed without a sampler, its shards counted
before any worker starts, passes re-opened outside the timed window, idle workers named."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadertune import run_trial
from loadertune.checks._shards import Shards, check_shards, shards_of
from loadertune.config._typed import LoaderConfig, to_run_config
from loadertune.errors import ConfigError
from loadertune.measure._diagnosis import diagnose_result
from loadertune.measure._timing import StepTimer
from tests.conftest import Compose


def _stream(*extra: str) -> list[str]:
    return [
        "dataset=custom",
        "dataset._target_=stream_data.ShardedVectors",
        "+dataset.n_shards=3",
        "+dataset.per_shard=8",
        "model=mlp",
        "trial.precision=null",
        "trial.steps=4",
        *extra,
    ]


def test_an_iterable_is_measured_and_its_short_passes_reopened_outside_the_window(
    compose: Compose, fixtures_on_path: Path
) -> None:
    # 24 samples a pass = 6 batches of 4: a 12-step window meets the end of passes.
    seen: list[bool] = []
    config = to_run_config(compose(_stream("loader.num_workers=2", "trial.steps=12")))
    result = run_trial(config, on_step=lambda r, timed: seen.append(timed))
    assert result.summary.steps == 12
    assert result.summary.samples == 48
    reopens = result.metrics()["window_reopens"]
    assert reopens >= 1
    assert result.epochs >= 3
    assert seen.count(True) == 12  # the steps that opened a pass were reported untimed
    assert result.metrics()["idle_workers"] == 0
    assert result.idle_workers == []
    # The window's clock stopped while a pass opened: its steps fill it back to back.
    assert result.summary.window_s == pytest.approx(result.steps[-1].end - result.steps[0].start)


def test_more_workers_than_declared_shards_is_refused_before_any_worker(
    compose: Compose, fixtures_on_path: Path
) -> None:
    config = to_run_config(compose(_stream("loader.num_workers=4")))
    with pytest.raises(ConfigError) as err:
        run_trial(config)
    text = str(err.value)
    assert err.value.key == "loader.num_workers"
    assert "3 shards (n_shards)" in text and "loader.num_workers<=3" in text


def test_a_worker_that_yielded_nothing_is_recorded_and_named(
    compose: Compose, fixtures_on_path: Path
) -> None:
    # The dataset does not declare its shards, so nothing refuses 4 workers for 3 shards:
    # the trial runs, and worker 3 never yields.
    config = to_run_config(compose(_stream("loader.num_workers=4", "+dataset.declare=false")))
    result = run_trial(config)
    assert result.idle_workers == [3]
    assert result.metrics()["idle_workers"] == 1
    found = diagnose_result(result)
    assert "Worker 3 yielded nothing" in found.sentence
    assert found.evidence["idle_workers"] == [3]


def test_a_dataset_that_splits_by_sample_is_warned_about_not_refused(
    compose: Compose, fixtures_on_path: Path
) -> None:
    config = to_run_config(
        compose(_stream("loader.num_workers=4", "dataset._target_=stream_data.SampleSplitVectors"))
    )
    with pytest.warns(UserWarning, match=r"loader\.num_workers=4: .* by sample"):
        result = run_trial(config)
    assert result.idle_workers == []
    assert any("by sample" in w for w in result.warnings)  # kept for the record


class _TarList:
    def __init__(self, urls: list[str]) -> None:
        self.urls = urls


def test_shard_counts_from_real_shard_lists(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"part-{i:04d}.tar").write_bytes(b"")
    urls = sorted(str(p) for p in tmp_path.glob("*.tar"))
    assert shards_of(_TarList(urls)) == Shards(5, "urls")
    assert shards_of(object()) is None
    five = Shards(5, "urls")
    assert check_shards(LoaderConfig(num_workers=5), five) is None
    with pytest.raises(ConfigError, match=r"2 workers x trial.nproc_per_node=3 ranks = 6"):
        check_shards(LoaderConfig(num_workers=2), five, nproc_per_node=3)
    with pytest.raises(ConfigError) as err:
        check_shards(LoaderConfig(num_workers=0), five, nproc_per_node=8)
    assert err.value.key == "trial.nproc_per_node"
    line = check_shards(LoaderConfig(num_workers=8), Shards(5, "urls", by_sample=True))
    assert line is not None and "by sample" in line
    assert five.most_workers(2) == 2


def test_a_discarded_step_stops_the_window_clock() -> None:
    now = [0.0]

    def clock() -> float:
        return now[0]

    timer = StepTimer(clock=clock, cpu_clock=clock)
    for length in (1.0, 5.0, 1.0):  # the middle step opened a pass
        timer.start()
        now[0] += length
        timer.batch_ready()
        timer.copied()
        timer.stepped(4)
        if length == 5.0:
            timer.discard_last()
    first, last = timer.records
    assert first.end == 1.0 and last.start == 1.0 and last.end == 2.0


def test_a_pass_without_a_whole_batch_is_one_line_not_a_loop(
    compose: Compose, fixtures_on_path: Path
) -> None:
    # 1 shard of 2 samples, batches of 4 with drop_last: no pass ever yields a batch.
    config = to_run_config(compose(_stream("dataset.n_shards=1", "dataset.per_shard=2")))
    with pytest.raises(ConfigError) as err:
        run_trial(config)
    assert err.value.key == "loader.batch_size" and "whole pass" in str(err.value)


def test_a_dataset_without_shards_gets_a_fix_that_is_not_the_setting_already_made(
    compose: Compose, fixtures_on_path: Path
) -> None:
    config = to_run_config(compose(_stream("dataset.n_shards=0")))  # one rank, no workers
    with pytest.raises(ConfigError) as err:
        run_trial(config)
    assert err.value.key == "dataset.n_shards" and err.value.value == 0
    assert "declares no shards" in str(err.value) and "at least one shard" in err.value.fix
    assert "nproc_per_node<=" not in str(err.value)
