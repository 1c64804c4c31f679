"""The shard arithmetic of a streaming dataset, checked before any worker starts.

An iterable dataset is read shard by shard, and each DataLoader worker of each rank gets
whole shards (``webdataset``'s ``split_by_node``/``split_by_worker``, Hugging Face
``datasets``' iterable mode, most hand-written ``IterableDataset`` classes). With more
readers (``num_workers`` x ranks, or the ranks alone without workers) than shards, some get
no shard: they yield nothing, cost a process each and, in ``datasets``, are stopped with a
log line ("Too many dataloader workers"). So such settings are refused in one line naming
``loader.num_workers`` and the fix; a dataset that splits by sample instead (its
``split_by`` attribute is ``"sample"``) gives every reader work, and is only warned about.

The shard count is read from the dataset itself (:func:`shards_of`): an ``n_shards`` or
``num_shards`` attribute (``datasets.IterableDataset.num_shards``, the documented protocol
for a user's own class), else the length of a ``shards``, ``shard_list`` or ``urls`` list.
The built-in streaming datasets know theirs from the config (:func:`configured_shards`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadertune import datasets
from loadertune.config import (
    CustomDatasetConfig,
    HFIterableConfig,
    LoaderConfig,
    RunConfig,
    WebDatasetConfig,
)
from loadertune.errors import ConfigError

COUNT_ATTRS = ("n_shards", "num_shards")
LIST_ATTRS = ("shards", "shard_list", "urls")


@dataclass(frozen=True)
class Shards:
    """How many shards a dataset has, where that was read, and how it splits them."""

    count: int
    source: str  # the attribute (or config key) the count came from
    by_sample: bool = False  # readers share samples, not shards: none goes empty

    def most_workers(self, nproc_per_node: int = 1) -> int:
        """The most ``num_workers`` per rank that leave no reader without a shard."""
        return self.count // max(nproc_per_node, 1)


def shards_of(dataset: Any) -> Shards | None:
    """The shard count ``dataset`` declares, or None when it declares none."""
    by_sample = getattr(dataset, "split_by", "shard") == "sample"
    for attr in COUNT_ATTRS:
        value = getattr(dataset, attr, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return Shards(value, attr, by_sample)
    for attr in LIST_ATTRS:
        value = getattr(dataset, attr, None)
        if isinstance(value, Sequence) and not isinstance(value, str | bytes):
            return Shards(len(value), attr, by_sample)
    return None


def configured_shards(config: RunConfig) -> Shards | None:
    """The shard count of a built-in streaming dataset, from its config (nothing is built)."""
    ds = config.dataset
    if isinstance(ds, WebDatasetConfig):
        if ds.root is not None:
            found = len(list(Path(ds.root).expanduser().glob("*.tar")))
            return Shards(found, "dataset.root") if found else None
        return Shards(ds.shards, "dataset.shards")
    if isinstance(ds, HFIterableConfig):
        return Shards(ds.num_shards, "dataset.num_shards")
    return None


def check_shards(loader: LoaderConfig, shards: Shards, nproc_per_node: int = 1) -> str | None:
    """Refuse more readers than shards; None when they fit, a warning when the dataset
    splits by sample instead (every reader gets work, the shards are read by several).

    Raises:
        ConfigError: naming ``loader.num_workers`` (or ``trial.nproc_per_node``, or the
            shard count itself when it is 0) and the fix.
    """
    if shards.count < 1:
        _refuse_no_shards(shards)
    ranks = max(nproc_per_node, 1)
    readers = max(loader.num_workers, 1) * ranks
    if readers <= shards.count:
        return None
    who = (f"{loader.num_workers} workers" if loader.num_workers else "the training process") + (
        f" x trial.nproc_per_node={ranks} ranks" if ranks > 1 else ""
    )
    most = shards.most_workers(ranks)
    if shards.by_sample:
        return (
            f"loader.num_workers={loader.num_workers}: {who} = {readers} readers share the "
            f"dataset's {shards.count} shards ({shards.source}) by sample; "
            f"loader.num_workers<={max(most, 1)} reads each shard in one place"
        )
    if most == 0:
        raise ConfigError(
            "trial.nproc_per_node",
            ranks,
            f"is more ranks than the dataset's {shards.count} shards ({shards.source}): "
            f"{ranks - shards.count} ranks would get no shard",
            f"use trial.nproc_per_node<={max(shards.count, 1)}, or write the data in more shards",
        )
    raise ConfigError(
        "loader.num_workers",
        loader.num_workers,
        f"{who} = {readers} readers for the dataset's {shards.count} shards "
        f"({shards.source}): {readers - shards.count} of them would get no shard and yield "
        "nothing",
        f"use loader.num_workers<={most}, or write the data in more shards",
    )


def _refuse_no_shards(shards: Shards) -> None:
    """A dataset that declares no shards: no count of workers or ranks gets it any data, so
    the fix is the dataset's, not ``trial.nproc_per_node``'s (already the least)."""
    key = shards.source if shards.source.startswith("dataset.") else f"dataset.{shards.source}"
    raise ConfigError(
        key, shards.count, "declares no shards: every reader, whatever loader.num_workers "
        "and trial.nproc_per_node, would get none and yield nothing",
        "give the dataset at least one shard (check where it reads its data from, and "
        f"that its {shards.source} counts them)",
    )  # fmt: skip


def shard_limit(config: RunConfig) -> Shards | None:
    """The shards that bound ``num_workers`` for ``config``'s dataset: a built-in's from its
    config, a user's own iterable's from the built dataset (it is built, not iterated);
    None for a map-style dataset or an iterable that declares no shards."""

    found = configured_shards(config)
    if found is not None or not isinstance(config.dataset, CustomDatasetConfig):
        return found

    dataset = datasets.build_dataset(config)
    return shards_of(dataset) if datasets.is_iterable(dataset) else None
