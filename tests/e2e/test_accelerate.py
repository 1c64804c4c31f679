"""loadertune inside Hugging Face Accelerate, under the real ``torchrun --nproc-per-node=2``.

``accelerator.prepare`` re-creates each DataLoader it is given (a ``DataLoaderShard`` over a
new plain ``DataLoader`` with Accelerate's ``BatchSamplerShard``): an AutoLoader is refused
there, naming ``loadertune.prepare_autoloader``, which returns Accelerate's prepared loader
with an AutoLoader tuning inside it; ``build_dataloader`` adds no sampler of its own, so
``prepare`` shards it exactly once, and ``shard=True`` shards it for a plain torchrun script.

Run as a script, this file is what each rank runs: the cases named by ``--cases``, one after
another in one launch (a launch costs 10-20 s here); each rank trains a tiny model for two
epochs per case and writes what it saw to ``rank<k>.json``, and the tests assert from those
files. The plain-torchrun cases run first, before Accelerate is imported. No test asserts a
figure timed on this machine.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import traceback
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset

N, BATCH, EPOCHS, TUNE = 128, 4, 2, 16  # 16 batches per rank and epoch: settles at epoch 1
W0 = {"num_workers": 0}
W1 = {"num_workers": 1, "prefetch_factor": 2, "persistent_workers": True}
CFG = {"batch_size": BATCH, "shuffle": True, "num_workers": 1}  # build_dataloader's settings
FIX = "loadertune.prepare_autoloader(accelerator, loader)"
UNSHARDED = "every rank"  # in the warning for a loader no sampler shards under 2+ ranks

KNOWN = {
    # Accelerate: none seen in these runs (accelerate 1.16, torch 2.13, CPU). Its one CPU
    # warning, "OMP_NUM_THREADS/MKL_NUM_THREADS unset, we set it at ...", needs
    # OMP_NUM_THREADS unset, and every launch here sets it.
}
QUIET = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)  # as pyproject ignores
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT", "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_RUN_ID")  # fmt: skip


class Indexed(Dataset[tuple[torch.Tensor, int]]):
    """Sample i is (features [i / N], i); with ``touch``, reading any sample creates that file
    (in a worker too), so a test can tell that no sample was read."""

    def __init__(self, touch: Path | None = None) -> None:
        self.touch = touch

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if self.touch is not None:
            self.touch.touch()
        return torch.tensor([i / N]), i


# ---------------------------------------------------------------- the script each rank runs


@dataclass
class Rank:
    """What a case needs: where to write, which rank, and the Accelerator once made."""

    out: Path
    rank: int
    world: int
    accelerator: Any = None


def _group(ctx: Rank) -> None:
    """The process group a plain torchrun script starts itself (Accelerate reuses it)."""
    import torch.distributed as dist

    if ctx.world > 1 and not dist.is_initialized():
        dist.init_process_group("gloo")


def _accelerator(ctx: Rank) -> Any:
    if ctx.accelerator is None:
        import accelerate

        ctx.accelerator = accelerate.Accelerator(cpu=True)
    return ctx.accelerator


def _model(ctx: Rank) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def _train(accelerator: Any, model: Any, optimizer: Any, loader: Any, auto: Any = None) -> dict:
    """Two epochs of a real Accelerate step; what each epoch delivered, and where."""
    seen: dict[int, list[int]] = {}
    ends: dict[int, list[int]] = {}
    devices: set[str] = set()
    step, settled_at = 0, None
    for epoch in range(EPOCHS):
        for i, (x, index) in enumerate(loader):
            devices |= {str(x.device), str(index.device)}
            seen.setdefault(epoch, []).extend(index.tolist())
            if accelerator.gradient_state.end_of_dataloader:  # known before the last batch ends
                ends.setdefault(epoch, []).append(i)
            loss = torch.nn.functional.mse_loss(model(x), x)
            accelerator.backward(loss)  # DDP's all-reduce paces the ranks
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if auto is not None and settled_at is None and auto.decision is not None:
                settled_at = step
    on = torch.empty(0, device=accelerator.device).device  # cpu:0 moves a tensor to cpu
    return {
        "seen": seen, "ends": ends, "devices": sorted(devices), "len": len(loader),
        "device": str(on), "accelerator_device": str(accelerator.device),
        "settled_at": settled_at,
    }  # fmt: skip


def case_plain_shard(ctx: Rank) -> dict:
    """A plain torchrun loop over ``build_dataloader(..., shard=True)``: its own set_epoch."""
    import torch.distributed as dist

    from loadertune import build_dataloader

    _group(ctx)
    loader = build_dataloader(Indexed(), CFG, "cpu", shard=True)
    seen: dict[int, list[int]] = {}
    expected: dict[int, list[int]] = {}
    for epoch in range(EPOCHS):
        loader.sampler.set_epoch(epoch)
        expected[epoch] = list(loader.sampler)  # this rank's share, in order
        for _x, index in loader:
            seen.setdefault(epoch, []).extend(index.tolist())
            dist.all_reduce(torch.ones(1))  # where DDP would all-reduce the gradients
    return {"seen": seen, "expected": expected, "sampler": type(loader.sampler).__name__}


def case_unsharded(ctx: Rank) -> dict:
    """``build_dataloader`` and an AutoLoader with no sampler of their own, under 2 ranks:
    two epochs each, counting the warnings that say nothing sharded them."""
    import torch.distributed as dist

    from loadertune import AutoLoader, build_dataloader

    _group(ctx)
    record: dict[str, Any] = {}
    loaders = {
        "build_dataloader": build_dataloader(Indexed(), CFG, "cpu"),
        "autoloader": AutoLoader(
            Indexed(), batch_size=BATCH, shuffle=True, tune_steps=TUNE, candidates=[W0, W1]
        ),
    }
    for name, loader in loaders.items():
        with warnings.catch_warnings(record=True) as caught:
            _record_all()
            per_epoch = []
            for _epoch in range(EPOCHS):
                n = 0
                for _x, index in loader:
                    n += len(index)
                    dist.all_reduce(torch.ones(1))
                per_epoch.append(n)
        said = [str(w.message) for w in caught if UNSHARDED in str(w.message)]
        record[name] = {"per_epoch": per_epoch, "said": said}
        for w in caught:  # the rest, to the case's own list
            if UNSHARDED not in str(w.message):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return record


def case_refused(ctx: Rank) -> dict:
    """``accelerator.prepare(model, optimizer, AutoLoader(...))``: the error, and that no
    sample was read nor any worker started."""
    import multiprocessing

    from loadertune import AutoLoader, ConfigError

    accelerator = _accelerator(ctx)
    touched = ctx.out / f"touched{ctx.rank}"
    auto = AutoLoader(Indexed(touch=touched), batch_size=BATCH, shuffle=True, tune_steps=TUNE,
                      candidates=[W0, W1])  # fmt: skip
    model, optimizer = _model(ctx)
    before = {p.pid for p in multiprocessing.active_children()}  # earlier cases' may linger
    record: dict[str, Any] = {"raised": None}
    try:
        accelerator.prepare(model, optimizer, auto)
    except Exception as err:
        record = {
            "raised": type(err).__name__, "config_error": isinstance(err, ConfigError),
            "value_error": isinstance(err, ValueError), "message": str(err),
        }  # fmt: skip
    record["touched"] = touched.exists()
    record["started"] = len({p.pid for p in multiprocessing.active_children()} - before)
    return record


def case_prepare_autoloader(ctx: Rank) -> dict:
    """``prepare_autoloader`` then the model and optimizer through ``prepare``: two epochs."""
    from torch.utils.data import DataLoader

    import loadertune
    from loadertune import AutoLoader

    accelerator = _accelerator(ctx)
    auto = AutoLoader(Indexed(), batch_size=BATCH, shuffle=True, tune_steps=TUNE,
                      candidates=[W0, W1])  # fmt: skip
    loader = loadertune.prepare_autoloader(accelerator, auto)
    model, optimizer = accelerator.prepare(*_model(ctx))
    inner = loader.base_dataloader
    record = _train(accelerator, model, optimizer, loader, auto=inner)
    return record | {
        "type": type(loader).__name__, "is_dataloader": isinstance(loader, DataLoader),
        "inner": type(inner).__name__, "inner_batches": type(inner.batch_sampler).__name__,
        "settings": inner.settings, "decided": inner.decision is not None,
        "registered": any(d is loader for d in accelerator._dataloaders),
    }  # fmt: skip


def case_build_prepare(ctx: Rank) -> dict:
    """``accelerator.prepare(model, optimizer, build_dataloader(...))``: two epochs."""
    from loadertune import build_dataloader

    accelerator = _accelerator(ctx)
    model, optimizer = _model(ctx)
    built = build_dataloader(Indexed(), CFG, "cpu")
    model, optimizer, loader = accelerator.prepare(model, optimizer, built)
    record = _train(accelerator, model, optimizer, loader)
    inner = loader.base_dataloader
    return record | {
        "built": type(built).__name__, "built_sampler": type(built.sampler).__name__,
        "type": type(loader).__name__, "inner": type(inner).__name__,
        "inner_batches": type(inner.batch_sampler).__name__, "num_workers": inner.num_workers,
    }  # fmt: skip


CASES: dict[str, Callable[[Rank], dict]] = {
    "plain_shard": case_plain_shard,
    "unsharded": case_unsharded,
    "refused": case_refused,
    "prepare_autoloader": case_prepare_autoloader,
    "build_prepare": case_build_prepare,
}
TWO_RANKS = list(CASES)  # the plain ones first, before Accelerate is imported
ONE_PROCESS = ["refused", "prepare_autoloader", "build_prepare"]


def _record_all() -> None:
    """Record every warning, as pytest's ``error`` filter would see it, less the kinds that
    pyproject.toml ignores."""
    warnings.simplefilter("always")
    for kind in QUIET:
        warnings.filterwarnings("ignore", category=kind)


def _run_cases(args: argparse.Namespace) -> None:
    ctx = Rank(Path(args.out), int(os.environ.get("RANK", "0")),
               int(os.environ.get("WORLD_SIZE", "1")))  # fmt: skip
    path = ctx.out / f"rank{ctx.rank}.json"
    result: dict[str, Any] = {"world": ctx.world, "cases": {}}
    for name in args.cases.split(","):
        with warnings.catch_warnings(record=True) as caught:
            _record_all()
            try:
                record = CASES[name](ctx)
            except BaseException:
                result["failed"] = {"case": name, "traceback": traceback.format_exc()}
                path.write_text(json.dumps(result))
                raise
        record["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
        result["cases"][name] = record
        path.write_text(json.dumps(result))  # after each case: what ran survives a later one
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


# ---------------------------------------------------------------- the tests


@dataclass
class Run:
    """One launch: each rank's file, and the launcher's output for a failure's message."""

    ranks: list[dict[str, Any]]
    output: str

    def case(self, name: str) -> list[dict[str, Any]]:
        """Every rank's record of ``name``; a failure shows why it has none."""
        if all(name in r.get("cases", {}) for r in self.ranks):
            return [r["cases"][name] for r in self.ranks]
        failed = [r["failed"]["traceback"] for r in self.ranks if "failed" in r]
        pytest.fail(f"case {name!r} did not finish on every rank\n" + "\n".join(failed)
                    + "\n--- launcher output ---\n" + self.output)  # fmt: skip


def _text(stream: str | bytes | None) -> str:
    return stream.decode(errors="replace") if isinstance(stream, bytes) else stream or ""


def _launch(out: Path, cases: list[str], ranks: int, script: Path | None = None,
            args: Iterable[str] = ()) -> tuple[Run, int | None]:  # fmt: skip
    """``script`` (this file) under ``torchrun --standalone`` with ``ranks`` ranks, or as one
    plain process for 1; its rank files, exit status and output."""
    launcher = [sys.executable]
    if ranks > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    script_args = ["--out", str(out), "--cases", ",".join(cases)] if script is None else []
    cmd = [*launcher, str(script or __file__), *script_args, *args]
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARS}
    env |= {"OMP_NUM_THREADS": "1"}
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        output, rc = done.stdout[-4000:] + done.stderr[-8000:], done.returncode
    except subprocess.TimeoutExpired as exc:
        output, rc = f"timed out after 300 s\n{_text(exc.stdout)}{_text(exc.stderr)}", None
    files = [out / f"rank{r}.json" for r in range(ranks)]
    run = Run([json.loads(f.read_text()) if f.exists() else {} for f in files], output)
    return run, rc


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Every case in one 2-rank torchrun launch."""
    run, rc = _launch(tmp_path_factory.mktemp("two_ranks"), TWO_RANKS, ranks=2)
    if rc != 0 and not any("failed" in r for r in run.ranks):
        pytest.fail(f"torchrun exited {rc} outside the cases\n{run.output}")
    return run


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The Accelerate cases in one plain process (no torchrun: Accelerate's NO type)."""
    run, rc = _launch(tmp_path_factory.mktemp("one_process"), ONE_PROCESS, ranks=1)
    if rc != 0 and not any("failed" in r for r in run.ranks):
        pytest.fail(f"the process exited {rc} outside the cases\n{run.output}")
    return run


def _exactly_once(records: list[dict[str, Any]], shuffled: bool = True) -> None:
    """Together the ranks saw every index exactly once in each epoch, an equal share each
    (N divides by ranks x batch: Accelerate pads with no repeats); shuffled, a new order
    each epoch."""
    for e in map(str, range(EPOCHS)):
        for r in records:
            assert len(r["seen"][e]) == N // len(records)
        union = [i for r in records for i in r["seen"][e]]
        assert sorted(union) == list(range(N)), f"epoch {e}: indices lost or repeated"
    if shuffled:
        orders = [records[0]["seen"][str(e)] for e in range(EPOCHS)]
        assert all(a != b for a, b in itertools.pairwise(orders)), "the same order each epoch"
        assert orders[0] != sorted(orders[0])


def _only_known(records: list[dict[str, Any]], expected: str = "") -> None:
    """No warning but those named in KNOWN (and ``expected``): pytest's ``error``, kept."""
    for r in records:
        left = [w for w in r["warnings"] if not any(k in w for k in KNOWN)]
        assert [w for w in left if not expected or expected not in w] == []


def _on_device(records: list[dict[str, Any]]) -> None:
    for r in records:
        assert r["devices"] == [r["device"]]


@pytest.mark.slow
def test_prepare_autoloader_tunes_each_ranks_share_together(two_ranks: Run) -> None:
    """Accelerate's DataLoaderShard around an AutoLoader over the BatchSamplerShard: every
    index once per epoch across the ranks, one setting settled at the same step on both, the
    batches on accelerator.device, the gradient state's end known at the last batch, and no
    warning that the loader is unsharded."""
    ranks = two_ranks.case("prepare_autoloader")
    _exactly_once(ranks)
    assert ranks[0]["settings"] == ranks[1]["settings"]
    assert ranks[0]["settings"]["shuffle"] is True  # as built: what an export would say
    assert ranks[0]["settled_at"] == ranks[1]["settled_at"] is not None
    assert ranks[0]["settled_at"] <= EPOCHS * N // (2 * BATCH)
    _on_device(ranks)
    per_rank = N // (2 * BATCH)
    for r in ranks:
        assert r["decided"]
        assert (r["type"], r["inner"], r["inner_batches"]) == (
            "DataLoaderShard", "AutoLoader", "BatchSamplerShard")  # fmt: skip
        assert r["is_dataloader"] and r["registered"]
        assert r["len"] == per_rank
        assert r["ends"] == {str(e): [per_rank - 1] for e in range(EPOCHS)}
    _only_known(ranks)


@pytest.mark.slow
def test_prepare_shards_build_dataloader_exactly_once(two_ranks: Run) -> None:
    """build_dataloader adds no sampler, so prepare's BatchSamplerShard is the only shard:
    no index lost (before, each rank's DistributedSampler half was halved again)."""
    ranks = two_ranks.case("build_prepare")
    _exactly_once(ranks)
    _on_device(ranks)
    for r in ranks:
        assert (r["built"], r["built_sampler"]) == ("RankCheckedDataLoader", "RandomSampler")
        assert (r["type"], r["inner"], r["inner_batches"]) == (
            "DataLoaderShard", "DataLoader", "BatchSamplerShard")  # fmt: skip
        assert r["num_workers"] == 1  # Accelerate re-created it with the settings built
        assert r["len"] == N // (2 * BATCH)
    _only_known(ranks)


@pytest.mark.slow
def test_prepare_refuses_an_autoloader_naming_the_fix(two_ranks: Run) -> None:
    """On every rank, a one-line ConfigError naming prepare_autoloader, raised before any
    sample is read or worker started."""
    for r in two_ranks.case("refused"):
        assert (r["raised"], r["config_error"], r["value_error"]) == ("ConfigError", True, True)
        assert FIX in r["message"] and "\n" not in r["message"]
        assert not r["touched"] and r["started"] == 0
    _only_known(two_ranks.case("refused"))


@pytest.mark.slow
def test_plain_torchrun_build_dataloader_shard_true(two_ranks: Run) -> None:
    """With shard=True, a DistributedSampler: each rank its share in its order, every index
    once per epoch, a new shuffle each epoch from set_epoch."""
    ranks = two_ranks.case("plain_shard")
    for r in ranks:
        assert r["sampler"] == "DistributedSampler"
        assert r["seen"] == r["expected"]
    _exactly_once(ranks)
    _only_known(ranks)


@pytest.mark.slow
def test_an_unsharded_loader_under_two_ranks_warns_once(two_ranks: Run) -> None:
    """Neither build_dataloader's loader nor an AutoLoader refuses to run unsharded (each
    rank reads every sample), but each says so once, in one line, over two epochs."""
    ranks = two_ranks.case("unsharded")
    for r in ranks:
        for name in ("build_dataloader", "autoloader"):
            assert r[name]["per_epoch"] == [N] * EPOCHS
            assert len(r[name]["said"]) == 1, (name, r[name]["said"])
            assert "\n" not in r[name]["said"][0]
    _only_known(ranks)


@pytest.mark.slow
def test_in_one_process_the_same_paths_work(one_process: Run) -> None:
    """Without torchrun (Accelerate's NO distributed type): prepare_autoloader delivers every
    index once per epoch and settles; prepare(build_dataloader(...)) too; and prepare refuses
    an AutoLoader the same way."""
    (auto,) = one_process.case("prepare_autoloader")
    _exactly_once([auto])
    assert auto["decided"] and auto["settled_at"] is not None
    assert (auto["type"], auto["inner"]) == ("DataLoaderShard", "AutoLoader")
    assert auto["ends"] == {str(e): [N // BATCH - 1] for e in range(EPOCHS)}
    (built,) = one_process.case("build_prepare")
    _exactly_once([built])
    _on_device([auto, built])
    (refused,) = one_process.case("refused")
    assert refused["config_error"] and FIX in refused["message"]
    assert not refused["touched"] and refused["started"] == 0
    _only_known([auto, built, refused])


# This file runs as each rank's script too, where no tests package is importable.
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "accelerate_autoloader.py"
EXAMPLE_ARGS = ["--samples", "200", "--batch-size", "8", "--epochs", str(EPOCHS)]
EXAMPLE_ARGS += ["--read-ms", "0.2"]


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [1, 2])
def test_the_example_runs(ranks: int, tmp_path: Path) -> None:
    """examples/accelerate_autoloader.py, alone and under torchrun with 2 ranks (200 samples
    in batches of 8 do not divide by 2 x 8: Accelerate pads, gather_for_metrics trims)."""
    run, rc = _launch(tmp_path, [], ranks=ranks, script=EXAMPLE, args=EXAMPLE_ARGS)
    assert rc == 0, run.output
    assert run.output.count("every index exactly once") == EPOCHS, run.output
    assert f"{ranks} process(es) settled on" in run.output, run.output
    assert UNSHARDED not in run.output, run.output


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--cases", default=",".join(TWO_RANKS))
    _run_cases(parser.parse_args())
