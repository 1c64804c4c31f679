"""AutoLoader inside Hugging Face Accelerate: Accelerate's own prepared loader, tuned inside.

``accelerator.prepare(loader)`` re-creates a ``DataLoader`` from its attributes as a plain
one (``DataLoaderShard`` over a new ``torch.utils.data.DataLoader``): an AutoLoader would
lose its tuning there, so it refuses (``_contract.accelerate_refusal``, from the one
attribute Accelerate reads first). :func:`prepare_autoloader` lets Accelerate prepare a
plain loader of the same arguments, which gives this process its shard
(``BatchSamplerShard``), the device placement, the RNG synchronisation and the
gradient-accumulation state, then puts an AutoLoader of the same arguments over that shard
as the loader it iterates.
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader

from loadertune.autoloader._loader import AutoLoader
from loadertune.errors import ConfigError


def prepare_autoloader(accelerator: Any, loader: AutoLoader) -> DataLoader[Any]:
    """Accelerate's prepared loader for ``loader``, with an AutoLoader tuning inside it.

    Args:
        accelerator: the ``accelerate.Accelerator`` that prepares the model and optimizer.
        loader: an AutoLoader, not yet iterated, built with the whole dataset (Accelerate
            cuts each process's share).

    Returns:
        What ``accelerator.prepare`` returns for a ``DataLoader`` (batches on
        ``accelerator.device``, this process's share), iterating an AutoLoader of
        ``loader``'s arguments over that share: its ``base_dataloader``, whose ``settings``,
        ``decision`` and ``report()`` the prepared loader answers too. ``loader`` itself is
        not iterated: use what this returns.
    """
    if not isinstance(loader, AutoLoader):
        raise ConfigError(
            "loader", type(loader).__name__, "is not an AutoLoader",
            "pass a DataLoader to accelerator.prepare itself",
        )  # fmt: skip
    plain = DataLoader(
        loader.dataset, batch_sampler=loader.batch_sampler, collate_fn=loader.collate_fn,
        worker_init_fn=loader.worker_init_fn, generator=loader.generator,
    )  # fmt: skip
    prepared = accelerator.prepare_data_loader(plain)
    shard = prepared.base_dataloader  # Accelerate's plain loader over this process's share
    prepared.base_dataloader = loader.with_batches(shard.dataset, shard.batch_sampler)
    prepared._is_accelerate_prepared = True  # as accelerator.prepare marks what it prepared
    return prepared  # type: ignore[no-any-return]
