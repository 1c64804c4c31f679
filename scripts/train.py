"""A real training loop fed by the loader settings loadertune recommends.

Composes the same config groups as ``loadertune`` (dataset, storage, model, loader, trial),
builds the loader with :func:`loadertune.build_dataloader`, trains ``train.epochs`` epochs of
the model with a real optimizer step, logs the run to MLflow as an ordinary training run, and
prints the measured samples/s next to the sweep's prediction when one is given::

    python scripts/train.py loader=best +train.epochs=3 +train.expect_samples_per_s=520

``model=custom`` trains the user's own step, and ``loader.collate_fn`` assembles the batches,
exactly as in a trial (see docs/custom_training.md).

Two throughputs are printed and logged:

- ``samples_per_s``, measured like a trial, which is what the sweep predicts: in each epoch,
  from the end of the workers' start-up (the first batch, or the burst of the first
  ``num_workers`` batches that arrive together) to the end of the epoch's last step, over the
  samples trained in between;
- ``end_to_end_samples_per_s``: all samples over all epochs' wall time, worker start-up
  included (with ``persistent_workers=false`` every epoch starts its workers again).

With ``+train.expect_samples_per_s`` the sweep's figure is logged beside them
(``predicted_samples_per_s``); the params ``built.*`` are the attributes of the DataLoader
actually built, next to the ``loader.*`` settings it was asked for.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any

import hydra
from omegaconf import DictConfig

from loadertune.checks import register_resolvers

register_resolvers()

BUILT = ("batch_size", "num_workers", "prefetch_factor", "persistent_workers", "pin_memory")
"""The DataLoader's own attributes, logged as ``built.*``: what reached the loader."""


def train(cfg: DictConfig) -> float:
    """Train; return samples/s after worker start-up, over all epochs."""
    import mlflow
    import torch

    from loadertune import build_dataloader
    from loadertune.checks import validate
    from loadertune.config import to_run_config
    from loadertune.datasets import build_dataset
    from loadertune.datasets.iterable import first_items, is_iterable
    from loadertune.loader import resolve_device, to_device
    from loadertune.models import build_train_step, split_batch
    from loadertune.record import flatten, param_text, use_experiment
    from loadertune.storage import open_storage

    options: dict[str, Any] = dict(cfg.get("train") or {})
    epochs = int(options.get("epochs", 2))
    expect = options.get("expect_samples_per_s")
    config = to_run_config(cfg)
    validate(config)
    device = torch.device(resolve_device(config.trial.device))
    torch.manual_seed(config.trial.seed)
    rank, world, device = _join_ranks(device)
    tracked = config.tracking.enabled and rank == 0
    say = print if rank == 0 else (lambda *a, **k: None)
    if tracked:
        # Artifacts beside the store under the output root, not ./mlruns of the working dir.
        use_experiment(
            config.tracking, config.paths.output_root, name=f"{config.tracking.experiment}-train"
        )
    run = mlflow.start_run(run_name="train") if tracked else contextlib.nullcontext()
    with open_storage(config.storage) as store, run:
        dataset = build_dataset(config, store)
        sample = first_items(dataset, 1)[0] if is_iterable(dataset) else dataset[0]
        step = build_train_step(
            config.model,
            sample,
            int(getattr(dataset, "num_classes", 0) or 10),
            device,
            config.dataset.name,
            getattr(dataset, "vocab_size", None),
        )
        if world > 1:  # paced as DDP paces it; shard=True gives each rank its share
            from loadertune.ranks.pacing import distribute

            step = distribute(step, device, lambda: None)
        loader = build_dataloader(dataset, cfg.loader, device, shard=world > 1)  # as tuned
        if tracked:
            settings = flatten(dict(cfg.loader))
            mlflow.log_params({f"loader.{k}": param_text(v) for k, v in settings.items()})
            mlflow.log_params({f"built.{k}": param_text(getattr(loader, k)) for k in BUILT})
        burst = max(1, config.loader.num_workers)  # batches of worker start-up per epoch
        samples = total = 0
        seconds = total_s = 0.0
        for epoch in range(epochs):
            if hasattr(loader.sampler, "set_epoch"):
                loader.sampler.set_epoch(epoch)  # a DistributedSampler under torchrun
            began = time.perf_counter()
            started = None
            count = everything = 0
            for index, batch in enumerate(loader):
                batch = to_device(batch, device, non_blocking=config.loader.pin_memory)
                step(batch)
                inputs, _ = split_batch(batch)
                everything += len(inputs)
                if started is not None:
                    count += len(inputs)
                elif index + 1 >= burst:
                    started = time.perf_counter()  # start-up is over: steady state from here
            ended = time.perf_counter()
            elapsed = ended - (started or ended)
            samples, seconds = samples + count, seconds + elapsed
            total, total_s = total + everything, total_s + (ended - began)
            rate = count / elapsed if elapsed > 0 else 0.0
            if tracked:
                mlflow.log_metric("epoch_samples_per_s", rate, step=epoch)
            say(
                f"epoch {epoch}: {everything} samples in {ended - began:.1f} s; "
                f"{rate:,.0f} samples/s after worker start-up"
            )
        if seconds <= 0:
            raise SystemExit(
                f"train: an epoch of {everything} samples is too short to time past the "
                f"{burst} batches of worker start-up; use a larger dataset.count"
            )
        samples, seconds, total, total_s = _node_figures(samples, seconds, total, total_s)
        rate = samples / seconds
        end_to_end = total / total_s
        if tracked:
            mlflow.log_metric("samples_per_s", rate)
            mlflow.log_metric("end_to_end_samples_per_s", end_to_end)
            if expect:  # the sweep's figure beside the one measured here
                mlflow.log_metric("predicted_samples_per_s", float(expect))
    say(
        f"trained {epochs} epochs: {rate:,.0f} samples/s after worker start-up "
        f"(as a trial measures), {end_to_end:,.0f} samples/s end to end"
    )
    if expect:
        ratio = rate / float(expect)
        say(
            f"the sweep predicted {float(expect):,.0f} samples/s: measured/predicted = "
            f"{ratio:.2f} ({'within' if abs(ratio - 1) <= 0.10 else 'outside'} 10%)"
        )
    return rate


def _join_ranks(device: Any) -> tuple[int, int, Any]:
    """Under torchrun (``WORLD_SIZE`` > 1): join the process group (nccl with one CUDA device
    per rank, else gloo); (rank, world size, this rank's device)."""
    import os

    import torch
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return dist.get_rank(), world, device


def _node_figures(*figures: float) -> list[float]:
    """(samples, seconds, samples, seconds) of the whole node: samples summed over the ranks,
    seconds the slowest rank's; this rank's own outside torchrun."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return list(figures)
    import torch

    on = "cuda" if dist.get_backend() == "nccl" else "cpu"
    counts = torch.tensor(figures[0::2], dtype=torch.float64, device=on)
    times = torch.tensor(figures[1::2], dtype=torch.float64, device=on)
    dist.all_reduce(counts)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    return [counts[0].item(), times[0].item(), counts[1].item(), times[1].item()]


@hydra.main(version_base="1.3", config_path="pkg://loadertune.conf", config_name="config")
def main(cfg: DictConfig) -> float:
    try:
        return train(cfg)
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    from loadertune.cli import check_loader_option

    check_loader_option(sys.argv[1:])
    main()
