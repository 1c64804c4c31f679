"""``AutoLoader``: a drop-in ``DataLoader`` that tunes its own settings in the first steps of
training, then keeps the cheapest setting within noise of the fastest."""

from __future__ import annotations

import time
import warnings
import weakref
from collections.abc import Callable, Generator, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadertune.autoloader._decision import Decision, report_text
from loadertune.autoloader._driver import Driver
from loadertune.autoloader._plan import IndexPlan, PlanSampler
from loadertune.autoloader._probe import device_of, loader_settings
from loadertune.autoloader._schedule import Setting, Tuner
from loadertune.autoloader._world import World, world
from loadertune.errors import ConfigError
from loadertune.machine import cpus_per_rank

if TYPE_CHECKING:
    import torch
    from torch.utils.data import DataLoader, Dataset

TUNED = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory")
STATE_VERSION = 1


class AutoLoader:
    """A ``DataLoader`` that finds its fastest cheap settings inside your training loop.

    Tunes ``num_workers``, ``prefetch_factor``, ``persistent_workers`` and (on an
    accelerator) ``pin_memory``; any of them passed explicitly stays fixed. The first
    ``tune_steps`` training steps probe settings in interleaved segments, timed from your
    own loop; every epoch still delivers each index exactly once.

    Under an initialised ``torch.distributed`` process group every rank probes the same
    settings over the same steps, rank 0 decides from the slowest rank's times, and every
    rank settles on its decision at the same step; only rank 0 records and exports. Build it
    on every rank with the same arguments (a ``DistributedSampler`` gives each its share).

    Args:
        dataset: a map-style dataset (an ``IterableDataset`` is refused with a
            :class:`~loadertune.errors.ConfigError` saying why: switching workers re-splits
            its shards and repeats samples; tune it with a sweep instead).
        tune_steps: training steps to tune within (0: no tuning, the model guess is not
            measured; the default, ``num_workers=0`` unless given, is kept).
        max_workers: most workers probed (default 8 per usable CPU, at most 64).
        probe_timeout_s: a probe's batch later than this (or 20 x the measured load time,
            whichever is longer) marks the probe hung.
        memory_limit_mb: a probe whose process tree exceeds this is dropped (default: what
            is resident now plus 80% of the memory available).
        device: where batches go; ``pin_memory`` is probed only for an accelerator.
        export: path of a ``best_loader.yaml`` to write once settled (a folder, or a path
            whose folder cannot be written, is refused here; a write failing at settling
            only warns).
        track: record the session in MLflow (None: when a run is open or a URI is set); a
            tracking server that does not answer within 5 s now is warned of and not used.
        candidates: settings to compare instead of those around the model guess.
        clock: seconds, for the timing (tests inject a fake one).
        **kwargs: the rest of ``DataLoader``'s arguments, unchanged.
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        *,
        tune_steps: int = 200,
        max_workers: int | None = None,
        probe_timeout_s: float = 10.0,
        memory_limit_mb: float | None = None,
        device: torch.device | str | None = None,
        export: str | Path | None = None,
        track: bool | None = None,
        candidates: list[Mapping[str, Any]] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        **kwargs: Any,
    ) -> None:
        from torch.utils.data import DataLoader

        _check_inputs(dataset, kwargs)
        self.dataset = dataset
        self.fixed = {k: kwargs.pop(k) for k in TUNED if k in kwargs}
        self._timeout = float(kwargs.pop("timeout", 0.0))
        self._context = kwargs.pop("multiprocessing_context", None)
        self._extra = {
            k: kwargs.pop(k) for k in ("collate_fn", "worker_init_fn", "pin_memory_device")
            if k in kwargs
        }  # fmt: skip
        self._template = DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, **kwargs)
        if self._template.batch_sampler is None:
            raise ValueError("AutoLoader needs batches: pass batch_size or batch_sampler")
        index = self._template.batch_sampler  # the user's, or the one DataLoader built
        self.batch_size: int = getattr(index, "batch_size", None) or batch_size or 1
        self.shuffle = bool(shuffle)
        self.drop_last: bool = getattr(index, "drop_last", self._template.drop_last)
        from loadertune.autoloader import _record

        self.device = device
        self.export = None if export is None else _record.check_export(export)
        self.track = _record.tracking_wanted(track)
        self.generator = kwargs.get("generator")
        self._plan = IndexPlan(self._template.batch_sampler, self.generator)
        self._world: World = world()
        self._tuner = _tuner(
            tune_steps, max_workers, device, self.fixed, candidates, self._world.local_size
        )
        limit = memory_limit_mb or _default_memory_limit()
        me = weakref.ref(self)  # no cycle: dropped, it stops its workers as a DataLoader does
        self._driver = Driver(
            dataset, self._plan, self._tuner,
            lambda s, sampler, t: _alive(me)._build(s, sampler, t),
            clock, probe_timeout_s, limit,
            lambda decision: _alive(me)._on_settle(decision), self._world,
        )  # fmt: skip
        self._driver.user_timeout_s = self._timeout
        if tune_steps <= 0:
            self._driver.resume_settled(Setting().fixed(self.fixed), None)
        self._resume = False
        self._live: weakref.ReferenceType[Generator[Any, None, None]] | None = None  # iterating
        self.run_id: str | None = None

    def close(self) -> None:
        """Stop every worker now (probes and the chosen loader); iterating starts them again."""
        self._driver.close()

    def __len__(self) -> int:
        return len(self._template)

    @property
    def sampler(self) -> Any:
        """The sampler, as a ``DataLoader``'s (``loader.sampler.set_epoch(epoch)`` works)."""
        return self._template.sampler

    @property
    def batch_sampler(self) -> Any:
        """The batch sampler the epochs' order is drawn from, as a ``DataLoader``'s."""
        return self._template.batch_sampler

    def __iter__(self) -> Iterator[Any]:
        """An epoch's batches. One iterator at a time: they share the epoch's index plan, so a
        second one would take the first one's batches (each index is delivered once)."""
        import inspect

        live = self._live() if self._live is not None else None
        if live is not None and inspect.getgeneratorstate(live) == inspect.GEN_SUSPENDED:
            raise RuntimeError(
                "AutoLoader: an iterator of this loader is still live mid-epoch; a second one "
                "would take its batches (each index is delivered once per epoch). Fix: finish "
                "or leave the first loop (break, or del the iterator) before iterating again, "
                "or build a second AutoLoader for a second pass"
            )
        resume, self._resume = self._resume, False
        it = self._driver.epoch(resume)
        self._live = weakref.ref(it)
        return it

    def _build(self, setting: Setting, sampler: PlanSampler, timeout_s: float) -> DataLoader[Any]:
        """A probe's (or the settled) DataLoader, through loadertune's ``build_dataloader``."""
        import torch

        from loadertune.loader import build_dataloader

        cfg = loader_settings(setting, self.batch_size, False, self.drop_last, self._context)
        seed = torch.Generator().manual_seed(self._plan.base_seed)  # the workers' seeds
        with warnings.catch_warnings():  # more workers than cores is what I/O-bound loads need
            warnings.filterwarnings("ignore", message="This DataLoader will create")
            return build_dataloader(
                self.dataset, cfg, self.device, batch_sampler=sampler, generator=seed,
                timeout=max(timeout_s, self._timeout) if timeout_s else self._timeout,
                **self._extra,
            )  # fmt: skip

    @property
    def settings(self) -> dict[str, Any]:
        """The chosen settings as ``build_dataloader`` takes them (until settled: the current)."""
        from dataclasses import asdict

        from loadertune.loader import effective_settings

        d = self._driver
        setting = d.settled or (d.segment.setting if d.segment else Setting().fixed(self.fixed))
        cfg = loader_settings(setting, self.batch_size, self.shuffle, self.drop_last, self._context)
        return asdict(effective_settings(cfg, self.device))

    @property
    def decision(self) -> Decision | None:
        """What the tuning found, once settled."""
        return self._driver.decision

    def report(self) -> str:
        """What was tried, measured and why the choice, in a few lines."""
        return report_text(self._driver.decision, self._tuner)

    def _on_settle(self, decision: Decision) -> None:
        """Record and export, once, on rank 0; a failing record warns but never stops training."""
        from loadertune.autoloader import _record

        if self._world.rank != 0:
            return
        settings, ranks = self.settings, self._world.size
        if self.export is not None:
            _record.export(self.export, settings, decision, ranks)
        if not (self.track or (self.track is None and _record.mlflow_active())):
            return
        from loadertune.result_stores import bounded_tracking_retries

        try:
            with bounded_tracking_retries():
                self.run_id = _record.record(settings, decision, self._tuner, self.report(), ranks)
        except Exception as err:  # MLflow down must not stop the training it tunes
            _record.warn_user(f"AutoLoader could not record to MLflow: {err}")

    def state_dict(self) -> dict[str, Any]:
        """Position within the epoch, the chosen settings and the tuning state.

        As torchdata's ``StatefulDataLoader``: call it between batches, save it with the
        model; ``load_state_dict`` on a new AutoLoader before iterating resumes mid-epoch.
        """
        from dataclasses import asdict

        from loadertune.autoloader._state import tuner_state

        d = self._driver
        return {
            "version": STATE_VERSION,
            "_num_yielded": self._plan.num_delivered,
            "_iterator_finished": self._plan.done,
            "plan": self._plan.state(),
            "settled": asdict(d.settled) if d.settled else None,
            "tuner": tuner_state(self._tuner, d.segment),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume where ``state`` was taken: no tuning again, no sample repeated or skipped."""
        from loadertune.autoloader._decision import decide
        from loadertune.autoloader._state import check_version

        check_version(state, STATE_VERSION)
        self._plan.restore(state["plan"])
        self._tuner.restore(state["tuner"])
        if state["settled"] is not None:
            from loadertune.machine import usable_cpus

            cpus = usable_cpus()  # the node's, as at settling
            decision = decide(self._tuner, cpus) if self._tuner.measures else None
            self._driver.resume_settled(Setting(**state["settled"]), decision)
        self._resume = self._plan.epoch >= 0 and not state["_iterator_finished"]


def _alive(ref: weakref.ReferenceType[AutoLoader]) -> AutoLoader:
    """The AutoLoader a callback belongs to (alive while it iterates)."""
    loader = ref()
    assert loader is not None
    return loader


def _tuner(
    budget: int,
    max_workers: int | None,
    device: torch.device | str | None,
    fixed: dict[str, Any],
    candidates: list[Mapping[str, Any]] | None,
    ranks: int = 1,
) -> Tuner:
    """The tuner for this machine: its CPUs (shared by the ``ranks`` on the node), whether
    pinning can matter, the user's fixed values and candidates."""
    cpus = cpus_per_rank(ranks)
    forced = [Setting(**c).fixed(fixed) for c in candidates] if candidates else None
    return Tuner(
        budget=budget,
        cpus=cpus,
        max_workers=max_workers or min(8 * cpus, 64),
        accelerator=device_of(device) and "pin_memory" not in fixed,
        fixed=fixed,
        forced=forced,
    )


def _default_memory_limit() -> float:
    """What this process holds now plus 80% of the memory still available, in MB."""
    import psutil

    held = psutil.Process().memory_info().rss
    return float(held + 0.8 * psutil.virtual_memory().available) / 2**20


ITERABLE_REFUSED = (
    "is an IterableDataset, which AutoLoader cannot tune and keep every sample exactly once "
    "per epoch: its workers split the shards among themselves, so a probe with another "
    "num_workers splits them anew and starts each shard from its beginning (samples "
    "repeated), and probing only at epoch boundaries costs a whole epoch per setting"
)


def _check_inputs(dataset: Dataset[Any], kwargs: Mapping[str, Any]) -> None:
    """Refuse what AutoLoader cannot tune and still deliver each sample once per epoch."""
    from torch.utils.data import IterableDataset

    if isinstance(dataset, IterableDataset):
        raise ConfigError(
            "dataset",
            type(dataset).__name__,
            ITERABLE_REFUSED,
            "tune it with a sweep (loadertune -m dataset=custom dataset._target_=<your class>) "
            "and build its loader with build_dataloader(dataset, 'best_loader.yaml')",
        )
    if kwargs.get("in_order", True) is False:
        raise ValueError("AutoLoader needs in_order=True to know which batches arrived")
