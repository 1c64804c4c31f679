"""AutoLoader under the real ``torchrun --nproc-per-node=2`` (gloo, DistributedSampler, an
all-reduce per step): every rank settles on the same setting at the same step, every index
exactly once per epoch across the world, through a probe that fails on one rank only and a
resume from per-rank state_dicts; only rank 0 records and exports.

Run as a script, this file is the training script each rank runs (``--case``); every rank
writes what it saw to ``rank<k>.json``, and the tests assert from those files. No test
asserts a figure timed on this machine.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset

N, BATCH, EPOCHS, TUNE = 320, 4, 3, 80  # 40 batches per rank and epoch; tuning spans two
W0 = {"num_workers": 0}
W1 = {"num_workers": 1, "prefetch_factor": 2, "persistent_workers": True}
W2 = {"num_workers": 2, "prefetch_factor": 2, "persistent_workers": True}


class Numbers(Dataset[int]):
    """Sample i is i, loaded in 0.3 ms; a worker of a 2-worker loader on ``crash_rank`` dies."""

    def __init__(self, crash_rank: int = -1) -> None:
        self.crash_rank = crash_rank

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> int:
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers == 2 and self.crash_rank == _rank():
            os._exit(3)
        time.sleep(0.0003)
        return i


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


# ---------------------------------------------------------------- the script each rank runs


def _train(args: argparse.Namespace) -> None:
    """Three epochs (or, with --stop-at, until that step, then a checkpoint) on this rank."""
    import torch.distributed as dist
    from torch.utils.data import DistributedSampler

    from loadertune import AutoLoader

    dist.init_process_group("gloo")
    rank, out = dist.get_rank(), Path(args.out)
    fault = args.case == "fault"
    ds = Numbers(crash_rank=1 if fault else -1)
    sampler: DistributedSampler[int] = DistributedSampler(ds, shuffle=True, seed=3)
    loader = AutoLoader(
        ds, batch_size=BATCH, sampler=sampler, tune_steps=TUNE, max_workers=2,
        probe_timeout_s=2.5, candidates=[W0, W1, W2] if fault else None,
        memory_limit_mb=1.0 if fault and rank == 1 else None,  # rank 1's worker probes: over
        export=out / f"best_rank{rank}.yaml", track=args.case == "record",
    )  # fmt: skip
    first, step = 0, 0
    if args.resume:
        loader.load_state_dict(torch.load(out / f"state{rank}.pt", weights_only=True))
        before = json.loads((out / f"rank{rank}.before.json").read_text())
        first, step = before["epoch"], before["step"]
    seen: dict[int, list[int]] = {}
    expected: dict[int, list[int]] = {}
    settled_at = None
    for epoch in range(first, EPOCHS):
        loader.sampler.set_epoch(epoch)
        expected[epoch] = list(sampler)  # this rank's share, in order
        for batch in loader:
            seen.setdefault(epoch, []).extend(batch.tolist())
            step += 1
            if settled_at is None and loader.decision is not None:
                settled_at = step
            flag = torch.ones(1)
            dist.all_reduce(flag)  # paces the ranks as DDP's gradient all-reduce does
            time.sleep(0.002)  # the accelerator's step
            if args.stop_at and step == args.stop_at:
                torch.save(loader.state_dict(), out / f"state{rank}.pt")
                _write(out / f"rank{rank}.before.json", epoch=epoch, seen=seen, step=step,
                       expected=expected, tuning=loader.decision is None)  # fmt: skip
                dist.destroy_process_group()
                return
    _write(
        out / f"rank{rank}.json", seen=seen, expected=expected, settled_at=settled_at,
        settings=loader.settings, report=loader.report(), run_id=loader.run_id,
    )  # fmt: skip
    dist.destroy_process_group()


def _write(path: Path, **fields: Any) -> None:
    path.write_text(json.dumps(fields))


# ---------------------------------------------------------------- the tests


def test_without_a_process_group_the_world_is_this_process() -> None:
    from loadertune.autoloader._world import World, world

    w = world()
    assert type(w) is World and (w.rank, w.size, w.local_size) == (0, 1, 1)
    assert w.agree("boom") == "boom" and w.agree("") == ""
    assert w.gather(3) == [3] and w.from_root(lambda: 5) == 5


def test_a_segment_is_the_slowest_ranks_with_the_nodes_cpu_and_memory() -> None:
    """Paced by a collective, the rank with slow data waits in next(), the other in its step:
    the segment is the slowest pace, the longest data wait, the shortest step."""
    from loadertune.autoloader._schedule import Measure, Setting
    from loadertune.autoloader._slowest import slowest

    s = Setting(2, 2, True)
    starved = Measure(s, 0, steps=10, counted=8, counted_s=0.16, wait_s=0.15, step_s=0.05,
                      tree_cpu_s=1.0, peak_rss_mb=300)  # fmt: skip
    waiting = Measure(s, 0, steps=10, counted=8, counted_s=0.15, wait_s=0.01, step_s=0.19,
                      tree_cpu_s=2.0, peak_rss_mb=200)  # fmt: skip
    assert slowest([starved]) is starved  # one process: its own figures, untouched
    both = slowest([waiting, starved])
    assert both.per_batch_s == starved.per_batch_s
    assert (both.wait_s, both.step_s) == (0.15, 0.05)
    assert (both.tree_cpu_s, both.peak_rss_mb) == (3.0, 500)


def test_ranks_tuning_apart_stop_naming_what_differs() -> None:
    from loadertune.autoloader._world import World

    class Two(World):
        size = 2

        def gather(self, obj: Any) -> list[Any]:
            return [obj, (*obj[:-1], 99)]

    with pytest.raises(RuntimeError, match=r"rank 0: \(80, 40\), rank 1: \(80, 99\)"):
        Two().check_same("tune_steps or batches per epoch", (80, 40))
    World().check_same("anything", (80, 40))  # alone, nothing to compare


def test_ranks_on_different_segments_fail_with_the_fix_not_a_deadlock() -> None:
    from loadertune.autoloader._schedule import Measure, Setting
    from loadertune.autoloader._slowest import slowest

    a, b = Measure(Setting(2, 2, True), 0, steps=10), Measure(Setting(4, 2, True), 0, steps=12)
    with pytest.raises(RuntimeError, match=r"rank 1: w4 for 12 steps.*same arguments"):
        slowest([a, b])


def _torchrun(out: Path, *args: str, env: dict[str, str] | None = None) -> None:
    """This file under the real launcher, two ranks on loopback; its output on failure."""
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
        __file__, "--out", str(out), *args,
    ]  # fmt: skip
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    done = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]


def _ranks(out: Path) -> list[dict[str, Any]]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def _same_settling(ranks: list[dict[str, Any]], first: int = 0, spent: int = 0) -> None:
    """Both ranks settled on the same setting, at the same step, within the tuning budget:
    from step ``first``, where the tuning had booked ``spent`` steps, no more than the budget
    left (and a drained look-ahead's few steps past it)."""
    assert ranks[0]["settings"] == ranks[1]["settings"]
    assert ranks[0]["settled_at"] == ranks[1]["settled_at"] is not None
    assert ranks[0]["settled_at"] <= first + TUNE - spent + 2 * BATCH


def _exactly_once(ranks: list[dict[str, Any]], epochs: range) -> None:
    """Each rank delivered its DistributedSampler share in its order; together, every index
    exactly once per epoch; and the shuffle drew a new order each epoch."""
    for e in epochs:
        for r in ranks:
            assert r["seen"][str(e)] == r["expected"][str(e)]
        union = ranks[0]["seen"][str(e)] + ranks[1]["seen"][str(e)]
        assert sorted(union) == list(range(N))
    orders = [ranks[0]["seen"][str(e)] for e in epochs]
    assert all(a != b for a, b in itertools.pairwise(orders))


@pytest.mark.slow
def test_a_probe_failing_on_one_rank_is_dropped_by_both(tmp_path: Path) -> None:
    """On rank 1 only, the 2-worker probe's worker dies and the 1-worker probe goes over
    rank 1's memory limit: both ranks drop each at the same step, settle together on the
    setting left, and lose no index."""
    _torchrun(tmp_path, "--case", "fault")
    ranks = _ranks(tmp_path)
    _same_settling(ranks)
    _exactly_once(ranks, range(EPOCHS))
    assert ranks[0]["settings"]["num_workers"] == 0
    for r in ranks:
        assert "dropped: rank 1: worker(s)" in r["report"]
        assert "dropped: rank 1: memory" in r["report"]


@pytest.mark.slow
def test_resume_mid_epoch_from_per_rank_state(tmp_path: Path) -> None:
    """With shuffle and the model guess, stopped mid-epoch 0 while tuning, resumed from each
    rank's state_dict: each rank delivers the rest of its share in order, the ranks finish
    tuning on the same figures and settle together, every index exactly once. Both ranks
    are asked to track and export (each to a path of its own): only rank 0 does."""

    _torchrun(tmp_path, "--case", "plain", "--stop-at", "12")  # tuning takes >= 24 steps
    before = [json.loads((tmp_path / f"rank{r}.before.json").read_text()) for r in (0, 1)]
    assert all(b["epoch"] == 0 and b["tuning"] for b in before)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # The segment in progress at the checkpoint is measured again after it: the resumed
    # tuning may spend what the checkpoint's booked segments left of the budget.
    state = torch.load(tmp_path / "state0.pt", weights_only=True)
    spent = sum(m["steps"] for m in state["tuner"]["measures"])
    _torchrun(tmp_path, "--case", "record", "--resume", env={"MLFLOW_TRACKING_URI": uri})
    ranks = _ranks(tmp_path)
    _same_settling(ranks, first=before[0]["step"], spent=spent)
    assert ranks[0]["report"] == ranks[1]["report"]  # the same figures: the slowest rank's
    for b, r in zip(before, ranks, strict=True):
        r["seen"]["0"] = b["seen"]["0"] + r["seen"]["0"]  # the interrupted epoch, joined
        assert b["expected"]["0"] == r["expected"]["0"]
    _exactly_once(ranks, range(EPOCHS))
    assert ranks[0]["run_id"] and ranks[1]["run_id"] is None
    assert not (tmp_path / "best_rank1.yaml").exists()
    assert "Tuned with 2 ranks" in (tmp_path / "best_rank0.yaml").read_text()
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("loadertune")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert [run.info.run_id for run in runs] == [ranks[0]["run_id"]]
    assert runs[0].data.params["autotune.world_size"] == "2"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--case", choices=["plain", "record", "fault"], default="plain")
    parser.add_argument("--stop-at", type=int, default=0)
    parser.add_argument("--resume", action="store_true")
    _train(parser.parse_args())
