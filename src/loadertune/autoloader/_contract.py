"""What makes AutoLoader a ``DataLoader`` by PyTorch's contract: the tuned attributes read
the value in force, the epoch iterator goes on past a batch's error and holds its loader, the
arguments are checked as ``DataLoader`` checks them, and what cannot be kept is refused."""

from __future__ import annotations

from collections.abc import Mapping, Sized
from typing import Any

from torch.utils.data import Dataset

from loadertune._lazy import torch_data
from loadertune.autoloader._driver import Driver
from loadertune.errors import ConfigError

TUNED = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory")


class InForce:
    """A tuned ``DataLoader`` attribute: reads the value in force (the probe running, or the
    settled choice); assigned only while ``DataLoader.__init__`` runs.

    The instance's own ``__dict__`` keeps only what the caller fixed, as passed: a framework
    that re-creates the loader from its attributes (Lightning's ``_update_dataloader``) passes
    those again and leaves the rest to tune.
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, loader: Any, owner: type) -> Any:  # loader: an AutoLoader, or None
        if loader is None:
            return self
        if not loader._built:
            return loader.__dict__.get(self.name)
        return loader._in_force()[self.name]

    def __set__(self, loader: Any, value: Any) -> None:
        if loader._built:
            raise ValueError(
                f"{self.name} attribute should not be set after AutoLoader is initialized: "
                f"AutoLoader tunes it. Fix: pass {self.name}={value!r} to AutoLoader(...), "
                "which keeps it fixed"
            )
        loader.__dict__[self.name] = value


class Epoch:
    """One epoch's iterator. It holds its AutoLoader (``for b in AutoLoader(...)`` needs no
    other reference), and an error in one batch leaves it going, as a ``DataLoader``'s
    iterator does: that batch is spent, the next ``next()`` brings the one after."""

    def __init__(self, loader: Sized, driver: Driver, resume: bool) -> None:
        self._loader, self._driver, self._resume = loader, driver, resume
        self._open, self._begun = True, False

    def __iter__(self) -> Epoch:
        return self

    def __next__(self) -> Any:
        if not self._open:
            raise StopIteration
        if not self._begun:  # the order is drawn at the first batch, as a DataLoader's is:
            self._begun = True  # Lightning calls set_epoch(k) between iter() and next()
            self._driver.begin_epoch(self._resume)
        try:
            return self._driver.next_batch()
        except StopIteration:
            self._open = False
            raise

    def __len__(self) -> int:
        return len(self._loader)

    def close(self) -> None:
        """Release the epoch left before its end: a new one starts at the next ``iter()``."""
        if self._open:
            self._open = False
            if self._begun:
                self._driver.leave_epoch()


ITERABLE_REFUSED = (
    "is an IterableDataset, which AutoLoader cannot tune and keep every sample exactly once "
    "per epoch: its workers split the shards among themselves, so a probe with another "
    "num_workers splits them anew and starts each shard from its beginning (samples "
    "repeated), and probing only at epoch boundaries costs a whole epoch per setting"
)


def check_inputs(dataset: Dataset[Any], in_order: bool) -> None:
    """Refuse what AutoLoader cannot tune and still deliver each sample once per epoch."""
    if isinstance(dataset, torch_data.IterableDataset):
        raise ConfigError(
            "dataset",
            type(dataset).__name__,
            ITERABLE_REFUSED,
            "tune it with a sweep (loadertune -m dataset=custom dataset._target_=<your class>) "
            "and build its loader with build_dataloader(dataset, 'best_loader.yaml')",
        )
    if in_order is False:
        raise ValueError("AutoLoader needs in_order=True to know which batches arrived")


DATALOADER_ARGUMENTS = (
    "batch_size", "shuffle", "sampler", "batch_sampler", "num_workers", "collate_fn",
    "pin_memory", "drop_last", "timeout", "worker_init_fn", "multiprocessing_context",
    "generator", "prefetch_factor", "persistent_workers", "pin_memory_device", "in_order",
)  # fmt: skip


def checked_arguments(given: Mapping[str, Any], fixed: Mapping[str, Any]) -> dict[str, Any]:
    """``DataLoader.__init__``'s arguments from AutoLoader's, so that it checks every one with
    its own errors: the tuned ones left out (None) as a probe with workers would have them."""
    args = {k: given[k] for k in DATALOADER_ARGUMENTS}
    args["num_workers"] = workers_to_check(fixed, given["multiprocessing_context"])
    args["pin_memory"] = bool(given["pin_memory"])
    args["persistent_workers"] = bool(given["persistent_workers"])
    return args


def workers_to_check(fixed: Mapping[str, Any], context: Any) -> int:
    """The ``num_workers`` ``DataLoader.__init__`` checks the other arguments against: the
    fixed count, else one where an argument needs workers (the probes with workers use it)."""
    if "num_workers" in fixed:
        return fixed["num_workers"]  # type: ignore[no-any-return]
    needs = fixed.get("prefetch_factor") is not None or fixed.get("persistent_workers")
    return 1 if needs or context is not None else 0


def start_method(context: Any) -> str | None:
    """A ``multiprocessing_context`` as ``build_dataloader`` takes it: a start method's name
    (a context object, as a framework re-creating the loader passes it, by its name)."""
    if context is None or isinstance(context, str):
        return context
    return str(context.get_start_method())


def accelerate_refusal() -> ConfigError:
    """Why ``accelerator.prepare`` may not take an AutoLoader, and the fix."""
    return ConfigError(
        "loader", "AutoLoader(...)",
        "accelerator.prepare would re-create it as a plain DataLoader (untuned, "
        "num_workers=0 or the fixed value)",
        "loader = loadertune.prepare_autoloader(accelerator, loader), then prepare the rest",
    )  # fmt: skip
