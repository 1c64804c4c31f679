"""AutoLoader on an IterableDataset: refused before any worker starts, with the reason
(exactly-once per epoch cannot be kept) and the fix (a sweep, then build_dataloader), and
that fix delivers every sample exactly once per epoch."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from loadertune import AutoLoader, build_dataloader
from loadertune.errors import ConfigError


def test_an_iterable_is_refused_with_the_reason_and_the_fix(fixtures_on_path: Path) -> None:
    from stream_data import ShardedVectors

    before = len(psutil.Process().children(recursive=True))
    with pytest.raises(ConfigError) as err:
        AutoLoader(ShardedVectors(n_shards=2, per_shard=4), batch_size=2, tune_steps=8)
    assert err.value.key == "dataset"
    assert "exactly once per epoch" in str(err.value)
    assert "loadertune -m" in err.value.fix and "build_dataloader" in err.value.fix
    assert len(psutil.Process().children(recursive=True)) == before  # no worker started


def test_the_fix_delivers_each_sample_once_per_epoch(fixtures_on_path: Path) -> None:
    from stream_data import ShardedVectors

    # What a sweep exports, rebuilt for the iterable: no sampler, no shuffle, 2 workers.
    ds = ShardedVectors(n_shards=4, per_shard=6, dim=2)
    loader = build_dataloader(
        ds, {"batch_size": 3, "num_workers": 2, "shuffle": True, "drop_last": True}, "cpu"
    )
    expected = sorted(tuple(x.tolist()) for x, _ in ds)
    for _ in range(2):
        seen = sorted(tuple(row.tolist()) for batch, _ in loader for row in batch)
        assert seen == expected
