"""The built-in streaming datasets on the real libraries: WebDataset tar shards and a Hugging
Face ``datasets`` dataset in iterable mode, read by real DataLoader workers."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from loadertune import build_dataloader
from loadertune.checks._shards import configured_shards, shard_limit, shards_of
from loadertune.checks._validation import validate
from loadertune.config._typed import (
    HFIterableConfig,
    RunConfig,
    ThrottledStorageConfig,
    WebDatasetConfig,
    to_run_config,
)
from loadertune.datasets import build_dataset, check_dataset
from loadertune.errors import ConfigError
from loadertune.storage import open_storage


def _config(tmp_path: Path, dataset: dict[str, object], **loader: object) -> RunConfig:
    return to_run_config(
        {
            "dataset": dataset,
            "model": {"name": "simulated"},
            "storage": {"name": "local"},
            "loader": {"batch_size": 4, **loader},
            "paths": {"output_root": str(tmp_path), "dataset_cache": str(tmp_path / "cache")},
        }
    )


WDS = {"name": "webdataset", "count": 40, "shards": 4, "image_size": 16}
HF = {"name": "hf_iterable", "count": 48, "seq_len": 8, "num_shards": 3}


def _labels_and_count(loader: Any) -> tuple[Counter[int], int]:
    seen: Counter[int] = Counter()
    count = 0
    for _, labels in loader:
        seen.update(int(v) for v in labels)
        count += len(labels)
    return seen, count


def test_tar_shards_are_written_once_and_streamed_once_per_epoch_by_workers(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path, WDS)
    ds = build_dataset(config)
    shards = sorted((tmp_path / "cache").glob("webdataset-*/*.tar"))
    assert len(shards) == 4 and ds.n_shards == 4
    assert shards_of(ds).count == 4  # type: ignore[union-attr]
    mtimes = [p.stat().st_mtime_ns for p in shards]
    build_dataset(config)  # the cache is reused, not rewritten
    assert [p.stat().st_mtime_ns for p in shards] == mtimes
    image, label = next(iter(ds))
    assert 0 <= label < 10
    assert image.dtype == torch.uint8 and tuple(image.shape) == (3, 16, 16)
    loader = build_dataloader(ds, {"batch_size": 5, "num_workers": 2, "drop_last": False}, "cpu")
    for _ in range(2):  # 4 shards of 10 over 2 workers: every sample once an epoch
        seen, count = _labels_and_count(loader)
        assert count == 40 and seen == Counter({c: 4 for c in range(10)})


def test_a_shuffle_buffer_reorders_but_keeps_every_sample(tmp_path: Path) -> None:
    ordered = build_dataset(_config(tmp_path, WDS))
    shuffled = build_dataset(_config(tmp_path, {**WDS, "shuffle_buffer": 16}))
    plain = [int(label) for _, label in ordered]
    mixed = [int(label) for _, label in shuffled]
    assert sorted(mixed) == sorted(plain) and mixed != plain


def test_tar_shards_are_read_through_the_throttled_storage(tmp_path: Path) -> None:
    config = _config(tmp_path, WDS)
    build_dataset(config)  # generated at full speed first
    slow = ThrottledStorageConfig(latency_ms=100.0, bandwidth_mb_s=1000.0, queue_depth=1)
    with open_storage(slow) as store:
        ds = build_dataset(config, store)
        start = time.perf_counter()
        assert sum(1 for _ in ds) == 40
        elapsed = time.perf_counter() - start
    assert elapsed >= 4 * 0.1  # one read of each of the 4 shards, 100 ms each at the least


def test_hf_iterable_declares_its_shards_and_streams_once_per_epoch(tmp_path: Path) -> None:
    config = _config(tmp_path, HF)
    ds = build_dataset(config)
    assert ds.num_shards == 3 and shards_of(ds).source == "num_shards"  # type: ignore[union-attr]
    x, y = next(iter(ds))
    assert x.dtype == torch.int64 and tuple(x.shape) == (8,)
    assert torch.equal(x[1:], y[:-1])  # the next-token target
    loader = build_dataloader(ds, {"batch_size": 4, "num_workers": 2, "drop_last": False}, "cpu")
    rows = [tuple(r.tolist()) for x, _ in loader for r in x]
    assert len(rows) == 48 and len(set(rows)) == 48


def test_more_workers_than_configured_shards_is_refused_naming_the_key(tmp_path: Path) -> None:
    assert configured_shards(_config(tmp_path, HF)).count == 3  # type: ignore[union-attr]
    assert shard_limit(_config(tmp_path, WDS)).count == 4  # type: ignore[union-attr]
    with pytest.raises(ConfigError) as err:
        validate(_config(tmp_path, HF, num_workers=4))
    assert err.value.key == "loader.num_workers" and "num_shards" in str(err.value)
    validate(_config(tmp_path, HF, num_workers=3))


@pytest.mark.parametrize(
    ("dataset", "key"),
    [
        ({**WDS, "shards": 0}, "dataset.shards"),
        ({**WDS, "shards": 80}, "dataset.shards"),
        ({**WDS, "shuffle_buffer": -1}, "dataset.shuffle_buffer"),
        ({**WDS, "root": "/nonexistent"}, "dataset.root"),
        ({**HF, "num_shards": 0}, "dataset.num_shards"),
        ({**HF, "path": "/nonexistent"}, "dataset.path"),
    ],
)
def test_bad_streaming_knobs_name_the_key(
    tmp_path: Path, dataset: dict[str, object], key: str
) -> None:
    with pytest.raises(ConfigError) as err:
        check_dataset(_config(tmp_path, dataset).dataset)
    assert err.value.key == key


def test_streaming_configs_have_their_schema() -> None:
    assert WebDatasetConfig().shards == 8 and HFIterableConfig().num_shards == 8


def test_a_missing_streaming_package_is_one_line_with_the_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "webdataset" else real(name)
    )
    with pytest.raises(ConfigError) as err:
        validate(_config(tmp_path, WDS))
    assert err.value.key == "dataset.name" and "loadertune[streaming]" in err.value.fix
