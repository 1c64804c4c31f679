"""``AutoLoader``: a drop-in ``DataLoader`` that tunes its own settings in the first steps of
training, then keeps the cheapest setting within noise of the fastest."""

from __future__ import annotations

import time
import warnings
import weakref
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
from torch.utils.data import DataLoader, Dataset

from loadertune.autoloader import _record
from loadertune.autoloader._contract import (
    TUNED,
    Epoch,
    InForce,
    accelerate_refusal,
    check_inputs,
    checked_arguments,
    start_method,
)
from loadertune.autoloader._decision import Decision, decide, report_text
from loadertune.autoloader._driver import Driver
from loadertune.autoloader._plan import IndexPlan, PlanSampler
from loadertune.autoloader._probe import device_of, loader_settings
from loadertune.autoloader._schedule import Setting, Tuner
from loadertune.autoloader._state import check_version, tuner_state
from loadertune.autoloader._world import world
from loadertune.checks import worker_cap
from loadertune.loader import (
    accelerator_available,
    build_dataloader,
    effective_settings,
    warn_if_unsharded,
)
from loadertune.machine import cpus_per_rank, usable_cpus
from loadertune.record import bounded_tracking_retries

if TYPE_CHECKING:
    import torch

_NOT_ARGUMENTS = ("self", "dataset", "__class__")  # what ``locals()`` holds besides them
_ORDER = ("batch_size", "shuffle", "sampler", "batch_sampler", "drop_last")  # a batch sampler's
KEPT = ("shuffle", "tune_steps", "max_workers", "candidates", "probe_timeout_s",
        "memory_limit_mb", "device", "clock")  # fmt: skip
STATE_VERSION = 1


class AutoLoader(DataLoader):  # type: ignore[type-arg]
    """A ``DataLoader`` that finds its fastest cheap settings inside your training loop.

    Tunes ``num_workers``, ``prefetch_factor``, ``persistent_workers`` and (on an
    accelerator) ``pin_memory``; any of them passed explicitly stays fixed. The first
    ``tune_steps`` training steps probe settings in interleaved segments, timed from your
    own loop; every epoch still delivers each index exactly once. It is a
    ``torch.utils.data.DataLoader``: its arguments are checked as ``DataLoader`` checks them,
    its attributes read the values in force, and Lightning re-creates it with its sampler.
    Accelerate would re-create it as a plain ``DataLoader``: use :func:`prepare_autoloader`.

    Under an initialised ``torch.distributed`` process group (found at the first epoch) every
    rank probes the same settings over the same steps, rank 0 decides from the slowest rank's
    times, and every rank settles on its decision at the same step; only rank 0 records and
    exports. Build it on every rank with the same arguments and a sampler that gives each its
    share (a ``DistributedSampler``, or the one Lightning or Accelerate puts in); an epoch on
    several ranks with none warns once.

    Args:
        dataset: a map-style dataset (an ``IterableDataset`` is refused with a
            :class:`~loadertune.errors.ConfigError` saying why: switching workers re-splits
            its shards and repeats samples; tune it with a sweep instead).
        tune_steps: training steps to tune within (0: no tuning, the model guess is not
            measured; the default, ``num_workers=0`` unless given, is kept).
        max_workers: most workers probed (default: the most the machine holds,
            :func:`loadertune.checks._preflight.worker_cap`; no multiple of the CPUs, as workers
            waiting on reads cost none).
        probe_timeout_s: a probe's batch later than this (or 20 x the measured load time,
            whichever is longer) marks the probe hung; a ``timeout`` below it is yours and
            raises as a ``DataLoader``'s does.
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

    The other arguments are ``DataLoader``'s, with its defaults; the four tuned ones default
    to None (tune it).
    """

    shuffle: bool | None
    tune_steps: int
    max_workers: int | None
    candidates: list[Mapping[str, Any]] | None
    probe_timeout_s: float
    memory_limit_mb: float | None
    device: torch.device | str | None
    clock: Callable[[], float]
    num_workers = InForce()
    prefetch_factor = InForce()
    persistent_workers = InForce()
    pin_memory = InForce()
    _built = False  # DataLoader.__init__ has returned: the tuned attributes are read-only
    _resume = False  # the next epoch continues the one a checkpoint was taken in

    def __init__(
        self,
        dataset: Dataset[Any],
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pin_memory: bool | None = None,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool | None = None,
        pin_memory_device: str = "",
        in_order: bool = True,
        tune_steps: int = 200,
        max_workers: int | None = None,
        probe_timeout_s: float = 10.0,
        memory_limit_mb: float | None = None,
        device: torch.device | str | None = None,
        export: str | Path | None = None,
        track: bool | None = None,
        candidates: list[Mapping[str, Any]] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._arguments = {k: v for k, v in locals().items() if k not in _NOT_ARGUMENTS}
        check_inputs(dataset, in_order)
        self.fixed = {k: self._arguments[k] for k in TUNED if self._arguments[k] is not None}
        super().__init__(dataset, **checked_arguments(self._arguments, self.fixed))
        for key in TUNED:  # what the check set, replaced by what was given
            self.__dict__.pop(key, None)
        self.__dict__.update(self.fixed)
        self._keep(**self._arguments)
        self._built = True

    def _keep(self, **given: Any) -> None:
        """Keep the arguments ``DataLoader`` does not, each under its own name (a framework
        re-creating the loader from its attributes passes them again)."""

        if self.batch_sampler is None:
            raise ValueError("AutoLoader needs batches: pass batch_size or batch_sampler")
        index = self.batch_sampler  # the user's, or the one DataLoader built
        self._batch: int = getattr(index, "batch_size", None) or given["batch_size"] or 1
        self._drop_last: bool = getattr(index, "drop_last", given["drop_last"])
        self._context = start_method(given["multiprocessing_context"])
        for name in KEPT:
            setattr(self, name, given[name])
        export = given["export"]
        self.export = None if export is None else _record.check_export(export)
        self.track = _record.tracking_wanted(given["track"])  # as a re-creation passes it
        self._plan = IndexPlan(index, given["generator"])
        self._driver: Driver | None = None  # at the first epoch, when the ranks are known
        self._live: weakref.ReferenceType[Epoch] | None = None  # the epoch being iterated
        self.run_id: str | None = None

    @property
    def _is_accelerate_prepared(self) -> bool:
        """Refuse ``accelerator.prepare(loader)``: Accelerate reads this first, then would
        re-create the loader as a plain, untuned ``DataLoader``."""
        raise accelerate_refusal()

    def with_batches(self, dataset: Dataset[Any], batch_sampler: Any) -> AutoLoader:
        """An AutoLoader of these arguments over another dataset and batch sampler: the share
        a framework cut for this process (:func:`prepare_autoloader` puts Accelerate's in)."""
        keep = {k: v for k, v in self._arguments.items() if k not in _ORDER}
        share = type(self)(dataset, batch_sampler=batch_sampler, **keep)
        share.shuffle = self.shuffle  # the share's order is still this one's: exported so
        return share

    def _tuning(self) -> Driver:
        """The tuning loop, made at the first epoch: the ranks are known by then (a process
        group initialised after the loader was built counts)."""
        if self._driver is None:
            self._world = world()
            self._tuner = _tuner(
                self.tune_steps, self.max_workers, self.device, self.fixed, self.candidates,
                self._world.local_size,
            )  # fmt: skip
            limit = self.memory_limit_mb or _default_memory_limit()
            me = weakref.ref(self)  # no cycle: dropped, it stops its workers as a DataLoader does
            self._driver = Driver(
                self.dataset, self._plan, self._tuner,
                lambda s, sampler, t: _alive(me)._build(s, sampler, t),
                self.clock, self.probe_timeout_s, limit,
                lambda decision: _alive(me)._on_settle(decision), self._world,
            )  # fmt: skip
            self._driver.user_timeout_s = float(self.timeout)
            if self.tune_steps <= 0:
                self._driver.resume_settled(Setting().fixed(self.fixed), None)
        return self._driver

    def close(self) -> None:
        """Stop every worker now (probes and the chosen loader); iterating starts them again."""
        if self._driver is not None:
            self._driver.close()

    def __iter__(self) -> Epoch:  # type: ignore[override]
        """An epoch's batches. A new epoch releases the iterator before it: one whose batches
        were all taken (a framework that stops after ``len(loader)``) or one left mid-way."""
        live = self._live() if self._live is not None else None
        if live is not None:
            live.close()
        driver = self._tuning()
        if self._world.size > 1:
            warn_if_unsharded(self)
        resume, self._resume = self._resume, False
        epoch = Epoch(self, driver, resume)
        self._live = weakref.ref(epoch)
        return epoch

    def _build(self, setting: Setting, sampler: PlanSampler, hang_s: float) -> DataLoader[Any]:
        """A probe's (or the settled) DataLoader, through loadertune's ``build_dataloader``,
        with the ``collate_fn``, ``worker_init_fn`` and ``timeout`` in force."""

        cfg = loader_settings(setting, self._batch, False, self._drop_last, self._context)
        limits = [t for t in (hang_s, self.timeout) if t > 0 and setting.num_workers]
        with warnings.catch_warnings():  # more workers than cores is what I/O-bound loads need
            warnings.filterwarnings("ignore", message="This DataLoader will create")
            return build_dataloader(
                self.dataset, cfg, self.device, batch_sampler=sampler,
                timeout=min(limits) if limits else 0.0, collate_fn=self.collate_fn,
                worker_init_fn=self.worker_init_fn, pin_memory_device=self.pin_memory_device,
            )  # fmt: skip

    def _setting(self) -> Setting:
        """The setting in force: settled, or the probe's, or (before any) the fixed values."""
        d = self._driver
        if d is not None and d.settled:
            return d.settled
        live = d and (d.segment or (d.leaving and d.leaving.probe))  # a tail: its setting's turn
        return live.setting if live else Setting().fixed(self.fixed)

    def _in_force(self) -> dict[str, Any]:
        """The ``DataLoader`` settings in force, ``pin_memory`` only where it pins."""

        cfg = loader_settings(self._setting(), self._batch, bool(self.shuffle),
                              self._drop_last, self._context)  # fmt: skip
        cfg["pin_memory"] = cfg["pin_memory"] and accelerator_available(self.device)
        return cfg

    @property
    def settings(self) -> dict[str, Any]:
        """The chosen settings as ``build_dataloader`` takes them (until settled: the current)."""
        cfg = loader_settings(self._setting(), self._batch, bool(self.shuffle),
                              self._drop_last, self._context)  # fmt: skip
        return asdict(effective_settings(cfg, self.device))

    @property
    def decision(self) -> Decision | None:
        """What the tuning found, once settled."""
        return self._driver.decision if self._driver is not None else None

    def report(self) -> str:
        """What was tried, measured and why the choice, in a few lines."""
        return report_text(self.decision, self._tuning().tuner)

    def _on_settle(self, decision: Decision) -> None:
        """Record and export, once, on rank 0; a failing record warns but never stops training."""

        if self._world.rank != 0:
            return
        settings, ranks = self.settings, self._world.size
        if self.export is not None:
            _record.export(self.export, settings, decision, ranks)
        if not (self.track or (self.track is None and _record.mlflow_active())):
            return

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
        d = self._tuning()
        return {
            "version": STATE_VERSION,
            "_num_yielded": self._plan.num_delivered,
            "_iterator_finished": self._plan.done,
            "plan": self._plan.state(),
            "settled": asdict(d.settled) if d.settled else None,
            "tuner": tuner_state(d.tuner, d.segment),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume where ``state`` was taken: no tuning again, no sample repeated or skipped."""

        check_version(state, STATE_VERSION)
        self._plan.restore(state["plan"])
        self.load_tuning(state)
        self._resume = self._plan.epoch >= 0 and not state["_iterator_finished"]

    def load_tuning(self, state: dict[str, Any]) -> None:
        """Take back ``state``'s tuning (the settled setting, or the probes so far), not its
        place in the epoch: for a framework that resumes the place itself by counting its
        steps (Trainer, :class:`~loadertune.AutoLoaderTrainer`; then :meth:`skip_batches`).
        A settled state means no tuning again."""
        check_version(state, STATE_VERSION)
        d = self._tuning()
        d.tuner.restore(state["tuner"])
        if state["settled"] is not None:
            cpus = usable_cpus()  # the node's, as at settling
            decision = decide(d.tuner, cpus) if d.tuner.measures else None
            d.resume_settled(Setting(**state["settled"]), decision)

    def skip_batches(self, batches: int) -> None:
        """Start the next epoch after its first ``batches`` batches, as delivered before a
        checkpoint: a framework resuming mid-epoch by its count of trained batches (Trainer's
        ``get_resumed_dataloader``) skips them without reading them. The epoch's order is
        drawn as always, and AutoLoader delivers in that order, so those are the ones the
        interrupted run delivered; each sample is still delivered once that epoch."""
        if isinstance(batches, bool) or not isinstance(batches, int) or batches < 0:
            raise ValueError(f"skip_batches({batches!r}): a count of batches, 0 or more")
        self._plan.skip_next = batches


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
        max_workers=max_workers or worker_cap(ranks).workers,
        accelerator=device_of(device) and "pin_memory" not in fixed,
        fixed=fixed,
        forced=forced,
    )


def _default_memory_limit() -> float:
    """What this process holds now plus 80% of the memory still available, in MB."""
    held = psutil.Process().memory_info().rss
    return float(held + 0.8 * psutil.virtual_memory().available) / 2**20
