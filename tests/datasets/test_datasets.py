"""Datasets: generated once and atomically, picklable and small per worker, right items.

Each dataset option runs through ``run_trial`` (spawn and forkserver workers included), and
each runs once as ``loadertune`` from the command line.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from loadertune import run_trial
from loadertune.checks._validation import validate
from loadertune.config._typed import ArrayShardsConfig, TokensConfig, to_run_config
from loadertune.datasets import build_dataset
from loadertune.datasets._cache import MARKER, ensure_generated
from loadertune.datasets.array_shards import ArrayShardsDataset, ensure_array_shards
from loadertune.datasets.tokens import TokenDataset, ensure_tokens
from loadertune.errors import ConfigError
from tests._cli import tiny_trial
from tests.conftest import Compose
from tests.window import assert_whole_window

SHARDS = [
    "dataset=array_shards",
    "dataset.count=40",
    "dataset.sample_shape=[3,8,8]",
    "dataset.shard_size=16",
    "dataset.num_classes=3",
]
TOKENS = [
    "dataset=tokens",
    "dataset.count=4000",
    "dataset.seq_len=16",
    "dataset.vocab_size=100",
    "model=transformer",
    "model.layers=1",
    "model.d_model=16",
    "model.heads=2",
]


# ---- array_shards -------------------------------------------------------------------------


def test_shards_are_generated_once_with_labels(tmp_path: Path) -> None:
    cfg = ArrayShardsConfig(count=40, sample_shape=[3, 8, 8], shard_size=16, num_classes=3)
    root = ensure_array_shards(cfg, tmp_path)
    shards = sorted(root.glob("shard_*.npy"))
    assert [np.load(p, mmap_mode="r").shape[0] for p in shards] == [16, 16, 8]
    assert (root / MARKER).exists()
    stamp = (root / MARKER).stat().st_mtime_ns
    assert ensure_array_shards(cfg, tmp_path) == root
    assert (root / MARKER).stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [root.name]  # no temporary folder left

    ds = ArrayShardsDataset(root)
    assert len(ds) == 40 and ds.num_classes == 3
    x, y = ds[37]
    assert x.dtype == torch.uint8 and tuple(x.shape) == (3, 8, 8)
    assert torch.equal(x, torch.from_numpy(np.load(shards[2])[37 - 32]))
    assert y == 37 % 3
    with pytest.raises(IndexError):
        ds[40]


def test_shards_pickle_small_even_after_reading(tmp_path: Path) -> None:
    root = ensure_array_shards(ArrayShardsConfig(count=2000, sample_shape=[256]), tmp_path)
    ds = ArrayShardsDataset(root)
    before = len(pickle.dumps(ds))
    for i in (0, 1500, 1999):
        ds[i]
    after = len(pickle.dumps(ds))
    assert after == before < 4000  # maps are reopened per process, never pickled as arrays
    clone = pickle.loads(pickle.dumps(ds))
    assert torch.equal(clone[1500][0], ds[1500][0])


def test_users_own_shards_without_labels(tmp_path: Path, compose: Compose) -> None:
    np.save(tmp_path / "a.npy", np.arange(12, dtype=np.float32).reshape(3, 4))
    np.save(tmp_path / "b.npy", np.arange(8, dtype=np.float32).reshape(2, 4))
    ds = ArrayShardsDataset(tmp_path)
    assert len(ds) == 5
    assert ds[3].tolist() == [0.0, 1.0, 2.0, 3.0]  # no labels.npy: the tensor alone
    config = to_run_config(
        compose(
            [
                "dataset=array_shards",
                f"dataset.root={tmp_path}",
                "model=mlp",
                "loader.batch_size=2",
                "trial.steps=2",
            ]
        )
    )
    assert_whole_window(run_trial(config), steps=2, batch_size=2)


def test_shards_of_different_shapes_are_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.zeros((2, 4), dtype=np.float32))
    np.save(tmp_path / "b.npy", np.zeros((2, 5), dtype=np.float32))
    with pytest.raises(ValueError, match=r"b\.npy holds float32 rows shaped \(5,\)"):
        ArrayShardsDataset(tmp_path)


def test_a_leftover_without_its_marker_is_regenerated(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "half-written").write_text("")
    root = ensure_generated(tmp_path, "data", {}, lambda d: (d / "ok").write_text("1"))
    assert sorted(p.name for p in root.iterdir()) == [MARKER, "ok"]


# ---- tokens ----------------------------------------------------------------------------------


def test_tokens_are_windows_with_next_token_targets(tmp_path: Path) -> None:
    path = ensure_tokens(TokensConfig(count=1000, seq_len=16, vocab_size=100), tmp_path)
    assert path.stat().st_size == 2000
    raw = np.fromfile(path, dtype=np.uint16)
    assert raw.max() < 100
    ds = TokenDataset(path, seq_len=16, vocab_size=100)
    assert len(ds) == (1000 - 1) // 16
    x, y = ds[3]
    assert x.dtype == torch.int64 and x.shape == (16,)
    assert x.tolist() == raw[48:64].tolist()
    assert y.tolist() == raw[49:65].tolist()
    assert len(pickle.dumps(ds)) < 1000


def test_users_own_token_file(tmp_path: Path, compose: Compose) -> None:
    corpus = tmp_path / "train.bin"
    np.arange(300, dtype=np.uint16).tofile(corpus)
    overrides = [*TOKENS, f"dataset.path={corpus}", "dataset.vocab_size=300", "loader.batch_size=2"]
    config = to_run_config(compose([*overrides, "trial.steps=2"]))
    ds = build_dataset(config)
    assert ds[1][0].tolist() == list(range(16, 32))
    assert_whole_window(run_trial(config), steps=2, batch_size=2)


# ---- images ----------------------------------------------------------------------------------


def test_png_images_with_varied_sizes(compose: Compose, tmp_path: Path) -> None:
    config = to_run_config(compose(["dataset.format=png", "dataset.size_jitter=0.5"]))
    result = run_trial(config)
    assert_whole_window(result, steps=4, batch_size=4)
    files = list((tmp_path / "datasets").glob("*/class_*/*.png"))
    assert len(files) == 48
    from PIL import Image

    sizes = set()
    for f in files:
        with Image.open(f) as image:
            sizes.add(image.size)
    assert len(sizes) > 10  # sides vary per image


def test_image_folder_reads_a_users_folder(compose: Compose, tmp_path: Path) -> None:
    run_trial(to_run_config(compose(["model=simulated", "model.step_ms=0"])))
    (root,) = (tmp_path / "datasets").iterdir()
    config = to_run_config(
        compose(["dataset=image_folder", f"dataset.root={root}", "dataset.crop_size=24"])
    )
    result = run_trial(config)
    assert_whole_window(result, steps=4, batch_size=4)


# ---- every dataset, every start method, and the checks -----------------------------------


@pytest.mark.parametrize("start", ["spawn", "forkserver"])
@pytest.mark.parametrize("workload", [[*SHARDS, "model=small_cnn"], TOKENS])
def test_datasets_work_with_spawned_workers(
    compose: Compose, workload: list[str], start: str
) -> None:
    config = to_run_config(
        compose([*workload, "loader.num_workers=1", f"loader.multiprocessing_context={start}"])
    )
    result = run_trial(config)
    assert result.start_method == start
    assert_whole_window(result, steps=4, batch_size=4)


BAD_DATASETS = [
    (["dataset.quality=100"], "dataset.quality=100: must be in 1..95"),
    (["dataset.size_jitter=1.5"], "dataset.size_jitter=1.5"),
    (["dataset.format=gif"], "dataset.format=gif: is not a format"),
    ([*SHARDS, "dataset.dtype=complex64"], "dataset.dtype=complex64"),
    ([*SHARDS, "dataset.sample_shape=[]"], "dataset.sample_shape=[]"),
    ([*SHARDS, "dataset.root=/no/such/dir"], "dataset.root=/no/such/dir: is not a folder of .npy"),
    ([*TOKENS, "dataset.vocab_size=70000"], "dataset.vocab_size=70000: must be in 2..65536"),
    ([*TOKENS, "dataset.count=10"], "dataset.count=10: must be at least dataset.seq_len + 1"),
    ([*TOKENS, "dataset.path=/no/such.bin"], "dataset.path=/no/such.bin: is not an existing"),
]


@pytest.mark.parametrize(("overrides", "prefix"), BAD_DATASETS)
def test_bad_dataset_knobs_name_the_key(
    compose: Compose, overrides: list[str], prefix: str
) -> None:
    with pytest.raises(ConfigError) as info:
        validate(to_run_config(compose(overrides)))
    assert str(info.value).startswith(prefix)
    assert "Fix: " in str(info.value)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "shown"),
    [
        ([*SHARDS, "model=resnet18", "model.width=4"], "dataset=array_shards"),
        ([*TOKENS, "loader.num_workers=1"], "dataset=tokens"),
    ],
)
def test_datasets_from_the_command_line(tmp_path: Path, overrides: list[str], shown: str) -> None:
    proc = tiny_trial(tmp_path, *overrides, "tracking.enabled=false")
    assert proc.returncode == 0, proc.stderr
    assert shown in proc.stdout
