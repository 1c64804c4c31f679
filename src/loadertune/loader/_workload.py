"""What a trial runs, built once from its config: the dataset on its storage, the loader
settings that take effect, the model step, and the loader over a stream that cannot run dry.

Shared by a one-process trial (:mod:`loadertune.trial`) and each rank of a multi-rank one
(:mod:`loadertune.ranks`), so both measure the same thing.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loadertune import datasets
from loadertune._lazy import torch, torch_mp
from loadertune.checks import _preflight as preflight
from loadertune.config import LoaderConfig, RunConfig, TrialConfig, in_flight
from loadertune.errors import ConfigError
from loadertune.guards import expect_workers, tether
from loadertune.loader._build import build_dataloader, effective_settings
from loadertune.loader._rank_share import RankShare
from loadertune.measure import StopRule, stream_sampler
from loadertune.models import build_train_step

if TYPE_CHECKING:
    from loadertune.checks import Batch
    from loadertune.storage import StorageSession


def resolve_device(name: str) -> str:
    """``auto`` picks CUDA when present, else the CPU; asking for absent CUDA is refused.

    Raises:
        ConfigError: ``trial.device`` names CUDA on a machine without it.
    """
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            "trial.device",
            name,
            "asks for CUDA but torch sees no CUDA device here",
            "use trial.device=auto or cpu on this machine",
        )
    return name


@dataclass
class Workload:
    """What a trial runs: the dataset, the loader settings that take effect, the model step."""

    dataset: Any
    effective: LoaderConfig
    device: Any
    step_fn: Callable[[Any], None]
    start_method: str
    notes: list[str] = field(default_factory=list)  # warnings of the pre-flight checks
    batch: Batch | None = None  # what each worker keeps in flight (``preflight.worker_cap``)


def build_workload(config: RunConfig, store: StorageSession, dataset: Any = None) -> Workload:
    """Seed torch, build the dataset on the storage (unless given) and a model step, check."""
    tc = config.trial
    torch.manual_seed(tc.seed)
    if tc.torch_threads is not None:
        torch.set_num_threads(tc.torch_threads)
    device = torch.device(resolve_device(tc.device))
    dataset = datasets.build_dataset(config, store) if dataset is None else dataset
    if datasets.is_iterable(dataset) and not isinstance(dataset, datasets.WorkerTally):
        dataset = datasets.WorkerTally(dataset, config.loader.num_workers)  # to name idle workers
    num_classes = int(getattr(dataset, "num_classes", 0) or 10)
    vocab_size = getattr(dataset, "vocab_size", None)
    effective = effective_settings(config.loader, device)
    with warnings.catch_warnings(record=True) as caught:  # the shard warning, kept for the record
        warnings.simplefilter("always")
        sample, batch = preflight.check_dataset(effective, dataset, tc.nproc_per_node)
    notes = [str(w.message) for w in caught]
    for note in notes:
        warnings.warn(note, stacklevel=2)
    expect_workers(batch, effective.prefetch_factor)  # the memory guard, before workers start
    step_fn = build_train_step(
        config.model, sample, num_classes, device, config.dataset.name, vocab_size
    )
    return Workload(dataset, effective, device, step_fn, start_method(effective), notes, batch)


def start_method(effective: LoaderConfig) -> str:
    """How the loader's workers start: its context, else the platform's; ``none`` without."""
    if effective.num_workers == 0:
        return "none"
    method = effective.multiprocessing_context or torch_mp.get_start_method(allow_none=True)
    return method or torch_mp.get_all_start_methods()[0]


def build_loader(
    tc: TrialConfig, workload: Workload, warmup: int, steps: int, rank: int = 0, world: int = 1
) -> Any:
    """The DataLoader over a stream of indices that cannot run dry inside the window; with
    ``world`` ranks, each rank's share of a stream ``world`` times as long. An iterable
    dataset streams itself (its ranks split by node), and its pass may end inside the
    window: the loop opens the next (:class:`~loadertune.loader._step_loop.StepLoop`). Its workers
    die with this process, also when it is killed while they start (:mod:`.worker_tether`)."""
    if datasets.is_iterable(workload.dataset):  # no sampler: each worker streams its own shards
        loader = build_dataloader(workload.dataset, workload.effective, workload.device)
    else:
        loader = _indexed_loader(tc, workload, warmup, steps, rank, world)
    return tether(loader, workload.start_method)


def _indexed_loader(
    tc: TrialConfig, workload: Workload, warmup: int, steps: int, rank: int, world: int
) -> Any:
    """A map-style dataset's loader over this rank's share of a seeded index stream."""
    eff = workload.effective
    ahead = in_flight(eff.num_workers, eff.prefetch_factor)
    batches = 1 + warmup + steps + ahead + 1
    stream = stream_sampler(
        len(workload.dataset),
        batches * (eff.batch_size or 1) * world,
        eff.shuffle,
        torch.Generator().manual_seed(tc.seed),
    )
    if world > 1:
        stream = RankShare(stream, rank, world)  # its share, through DistributedSampler
    return build_dataloader(
        workload.dataset,
        eff,
        workload.device,
        sampler=stream,
        generator=torch.Generator().manual_seed(tc.seed),
        trust=True,  # the command line's own config: its paths were resolved and tried
    )


def stop_rule(tc: TrialConfig, num_workers: int) -> StopRule:
    """When the timed window has measured enough (:mod:`loadertune.measure._precision`)."""
    return StopRule.for_trial(tc.steps, tc.max_steps, tc.precision, num_workers)
