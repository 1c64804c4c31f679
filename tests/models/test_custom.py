"""``model=custom``, ``loader.collate_fn`` and ``loader.worker_init_fn``: the user's own training.

Unit tables first (dotted paths, the device move, the default loss), then the real configs
composed and checked in this process, then the command line in subprocesses: one-line
refusals that record nothing, and the worked example of docs/custom_training.md, run as
documented.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections import namedtuple
from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf

from loadertune.checks._validation import validate
from loadertune.config._targets import resolve
from loadertune.config._typed import CustomModelConfig, to_run_config
from loadertune.errors import ConfigError
from loadertune.loader._build import tensors_in, to_device
from loadertune.models._custom import default_loss
from tests._cli import SCRIPT, cli_env, run_cli
from tests.conftest import FIXTURES, ROOT, Compose

EXAMPLES = ROOT / "examples"
DOC = ROOT / "docs" / "custom_training.md"
VARLEN = [
    "dataset=custom",
    "dataset._target_=varlen.data.VarLenTokens",
    "+dataset.count=64",
    "+dataset.read_ms=0",
    "+dataset.vocab_size=50",
    "model=custom",
]
STEP = ["model._target_=varlen.train.make_step", "+model.vocab_size=50", "+model.d_model=8"]
PAD = ["loader.collate_fn=varlen.data.pad_collate"]


@pytest.fixture
def on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example package and the test fixtures importable, here and in subprocesses."""
    paths = [str(EXAMPLES), str(FIXTURES)]
    for path in paths:
        monkeypatch.syspath_prepend(path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([*paths, *sys.path]))


BAD_PATHS = [
    ("nodots", "is not a dotted path"),
    ("no_such_pkg_xyz.step", "cannot be imported (No module named 'no_such_pkg_xyz')"),
    ("varlen.data.no_such", "varlen.data has no attribute no_such"),
    ("varlen.data.PAD_TARGET", "is a int, not callable"),
]


@pytest.mark.parametrize(("path", "problem"), BAD_PATHS)
def test_a_path_that_cannot_work_is_one_line(on_path: None, path: str, problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        resolve("loader.collate_fn", path)
    assert str(err.value).startswith(f"loader.collate_fn={path}: {problem}")
    assert "Fix: " in str(err.value) and "\n" not in str(err.value)


def test_nested_attributes_resolve(on_path: None) -> None:
    assert resolve("model._target_", "varlen.train.TinyLM.forward") is not None


Pair = namedtuple("Pair", "x y")


def test_to_device_moves_every_tensor_and_keeps_the_structure() -> None:
    batch = {"a": (torch.ones(2), [torch.zeros(1), "text"]), "b": Pair(torch.ones(1), 3)}
    moved = to_device(batch, "meta")
    assert [t.device.type for t in tensors_in(moved)] == ["meta"] * 3
    assert isinstance(moved["a"], tuple) and isinstance(moved["a"][1], list)
    assert isinstance(moved["b"], Pair) and moved["b"].y == 3 and moved["a"][1][1] == "text"


def test_pytorch_pins_the_same_nested_structures() -> None:
    from torch.utils.data._utils.pin_memory import pin_memory

    class Pinnable:
        def pin_memory(self, device: Any = None) -> str:
            return "pinned"

    batch = {"a": (Pinnable(), [Pinnable()]), "b": Pair(Pinnable(), Pinnable())}
    assert pin_memory(batch) == {"a": ("pinned", ["pinned"]), "b": Pair("pinned", "pinned")}


LOSSES = [
    (torch.randn(3, 5), torch.tensor([0, 4, 2]), "cross_entropy"),
    (torch.randn(2, 4, 7), torch.tensor([[1, 2, -100, -100], [3, 4, 5, 6]]), "cross_entropy"),
    (torch.randn(3, 5), torch.randn(3), "mean"),
    (torch.randn(3, 1), None, "mean"),
]


@pytest.mark.parametrize(("out", "targets", "kind"), LOSSES)
def test_default_loss(out: torch.Tensor, targets: Any, kind: str) -> None:
    loss = default_loss(out, targets)
    expected = (
        torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), targets.reshape(-1))
        if kind == "cross_entropy"
        else out.mean()
    )
    assert torch.allclose(loss, expected)


def test_model_custom_composes_with_its_keyword_arguments(compose: Compose) -> None:
    config = to_run_config(compose([*VARLEN, *STEP, *PAD]))
    assert config.model == CustomModelConfig(
        target="varlen.train.make_step", kwargs={"vocab_size": 50, "d_model": 8}
    )
    assert config.loader.collate_fn == "varlen.data.pad_collate"
    assert config.loader.worker_init_fn is None
    with pytest.raises(ConfigError, match=r"^model\._target_=\?\?\?: is not set"):
        to_run_config(compose(["model=custom"]))


REFUSED = [
    # (overrides after VARLEN, the line's start)
    (
        [*STEP],
        "loader.collate_fn=null: PyTorch's default collate fails on the first 4 items of "
        "dataset=custom (RuntimeError: stack expects each tensor to be equal size",
    ),
    (
        [*STEP, "loader.collate_fn=user_steps.broken_collate"],
        "loader.collate_fn=user_steps.broken_collate: fails on the first 4 items of "
        "dataset=custom (ValueError: cannot pad these)",
    ),
    (
        [*PAD, "model._target_=user_steps.raises"],
        "model._target_=user_steps.raises: raised RuntimeError: no GPU budget",
    ),
    (
        [*PAD, "model._target_=varlen.train.make_step", "+model.widht=3"],
        "model._target_=varlen.train.make_step: raised TypeError",
    ),
    (
        [*PAD, "model._target_=user_steps.returns_number"],
        "model._target_=user_steps.returns_number: returned int, neither a step(batch) "
        "callable nor a torch.nn.Module",
    ),
    (
        [*PAD, "model._target_=user_steps.frozen_module"],
        "model._target_=user_steps.frozen_module: returned a Module with no trainable",
    ),
    (
        [*PAD, "model._target_=varlen.train.nope"],
        "model._target_=varlen.train.nope: varlen.train has no attribute nope",
    ),
    (
        [*STEP, *PAD, "loader.worker_init_fn=nowhere_xyz.seed"],
        "loader.worker_init_fn=nowhere_xyz.seed: cannot be imported",
    ),
    (
        [
            *STEP,
            "loader.collate_fn=user_steps.lambda_collate",
            "loader.num_workers=1",
            "loader.multiprocessing_context=spawn",
        ],
        "loader.collate_fn=user_steps.lambda_collate: cannot be pickled for spawn workers",
    ),
]


@pytest.mark.parametrize(("overrides", "start"), REFUSED)
def test_user_code_that_cannot_work_is_refused_by_validate(
    compose: Compose, on_path: None, overrides: list[str], start: str
) -> None:
    with pytest.raises(ConfigError) as err:
        validate(to_run_config(compose([*VARLEN, *overrides])))
    assert str(err.value).startswith(start), str(err.value)
    assert "Fix: " in str(err.value) and "\n" not in str(err.value)


def test_the_factory_gets_a_sample_batch_and_the_device(compose: Compose, on_path: None) -> None:
    import user_steps  # type: ignore[import-not-found]

    overrides = [*VARLEN, *PAD, "model._target_=user_steps.sized_factory", "+model.scale=3"]
    validate(to_run_config(compose(overrides)))
    assert user_steps.sized_factory.seen == ("tuple", "cpu", 3)


@pytest.mark.parametrize(
    "step", [STEP, ["model._target_=varlen.train.TinyLM", "+model.vocab_size=50"]]
)
def test_a_trial_trains_the_users_step_or_module(
    compose: Compose, on_path: None, step: list[str]
) -> None:
    from loadertune.record._tracking import trial_params
    from loadertune.trial import run_trial

    worker = ["loader.num_workers=1", "loader.worker_init_fn=varlen.data.seed_worker"]
    config = to_run_config(compose([*VARLEN, *step, *PAD, *worker, "trial.precision=null"]))
    result = run_trial(config)
    assert len(result.steps) == config.trial.steps
    params = trial_params(config)
    assert params["loader.collate_fn"] == "varlen.data.pad_collate"
    assert params["loader.worker_init_fn"] == "varlen.data.seed_worker"
    assert params["model.target"] == step[0].split("=")[1]


def test_an_exported_loader_file_rebuilds_the_same_loader(on_path: None, tmp_path: Path) -> None:
    from varlen.data import VarLenTokens, pad_collate, seed_worker  # type: ignore[import-not-found]

    from loadertune import build_dataloader

    exported = tmp_path / "best_loader.yaml"
    exported.write_text(
        "batch_size: 4\nnum_workers: 0\ncollate_fn: varlen.data.pad_collate\n"
        "worker_init_fn: varlen.data.seed_worker\n"
    )
    loader = build_dataloader(VarLenTokens(count=8, read_ms=0), OmegaConf.load(exported), "cpu")
    assert loader.collate_fn is pad_collate and loader.worker_init_fn is seed_worker
    inputs, targets = next(iter(loader))
    assert inputs.shape == targets.shape and inputs.shape[0] == 4


def test_a_single_trial_refuses_a_misspelt_collate_in_one_line_with_status_2(
    compose: Compose, on_path: None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """What ``loadertune`` runs (in-process): one line, exit status 2, nothing recorded."""
    from loadertune.cli import run_from_hydra

    bad = [*VARLEN, *STEP, "loader.collate_fn=varlen.data.pad_colate", "tracking.enabled=true"]
    with pytest.raises(SystemExit) as ended:
        run_from_hydra(compose(bad))
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [err.strip()] and err.startswith(
        "loadertune: error: loader.collate_fn=varlen.data.pad_colate: varlen.data has no "
        "attribute pad_colate. Fix: check the name"
    )
    assert not (tmp_path / "mlflow.db").exists()


# ---- the command line, in subprocesses ------------------------------------------------------


def run(cwd: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """``args`` run with the example's package and the fixtures importable."""
    return run_cli(cwd, env=cli_env(EXAMPLES, FIXTURES), timeout=timeout, command=args)


def documented_commands() -> list[list[str]]:
    """The ``loadertune`` and ``scripts/train.py`` commands in the doc's shell blocks."""
    blocks = re.findall(r"```(?:bash|sh)\n(.*?)```", DOC.read_text(), re.S)
    commands = []
    for block in blocks:
        for command in block.replace("\\\n", " ").splitlines():
            words = shlex.split(command)
            if words and words[0].startswith("PYTHONPATH="):
                commands.append(words[1:])
    return commands


TINY_SWEEP = [
    "hydra.sweeper.study_name=s",
    "hydra.sweeper.n_trials=3",
    "hydra.sweeper.verdict_top=2",
    "hydra.sweeper.verdict_repeats=1",
    "hydra.sweeper.params.loader.num_workers=range(0,3)",
    "+dataset.count=256",
    "+dataset.max_len=24",
    "+model.d_model=8",
    "loader.batch_size=4",
    "trial.warmup_steps=1",
    "trial.steps=3",
    "trial.precision=null",
]


@pytest.mark.slow
def test_the_documented_example_tunes_and_exports_the_users_loader(tmp_path: Path) -> None:
    sweep, train = documented_commands()
    assert sweep[:2] == ["loadertune", "-m"] and "model=custom" in sweep
    proc = run(tmp_path, SCRIPT, *sweep[1:], f"paths.output_root={tmp_path}", *TINY_SWEEP)
    assert proc.returncode == 0, proc.stderr
    assert "Recommended: num_workers=" in proc.stdout
    exported = (tmp_path / "conf" / "loader" / "best.yaml").read_text()
    assert "collate_fn: varlen.data.pad_collate" in exported
    assert "worker_init_fn: varlen.data.seed_worker" in exported

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("loadertune")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    trials = [r for r in runs if r.data.tags.get("loadertune.kind") == "trial"]
    assert trials and all(
        r.data.params["loader.collate_fn"] == "varlen.data.pad_collate"
        and r.data.params["model.target"] == "varlen.train.make_step"
        for r in trials
    )
    assert train[:2] == ["python", "scripts/train.py"] and "loader=best" in train
    searchpath = f"hydra.searchpath=[file://{tmp_path}/conf]"
    small = ["+dataset.count=32", "loader.batch_size=4", "tracking.enabled=false"]
    done = run(
        tmp_path,
        sys.executable,
        str(ROOT / train[1]),
        *train[2:],
        searchpath,
        f"paths.output_root={tmp_path}",
        *small,
    )
    assert done.returncode == 0, done.stderr
    assert "epoch 0: 32 samples" in done.stdout
