"""A ``best_loader.yaml`` names callables by dotted path; ``build_dataloader`` resolves only the
user's own modules and PyTorch's collates (``default_collate``, ``default_convert``, not the rest
of ``torch`` nor loadertune's own code) unless told to trust more: a file naming ``os.system`` or
``subprocess.getoutput`` as its collate is refused before anything is called, and so is one
that reaches them through a trusted module (``mypkg.os.system``): where the callable is
defined counts, not the path to it."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import Dataset

from loadertune import build_dataloader
from loadertune.errors import ConfigError
from tests.conftest import ROOT


class Ints(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 6

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor([i])


def _export(tmp_path: Path, **callables: str) -> Path:
    path = tmp_path / "best_loader.yaml"
    lines = ["batch_size: 2", "num_workers: 0", "shuffle: false"]
    lines += [f"{k}: {v}" for k, v in callables.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("key", "path"),
    [
        ("collate_fn", "subprocess.getoutput"),
        ("collate_fn", "os.system"),
        ("collate_fn", "builtins.exec"),
        ("worker_init_fn", "shutil.rmtree"),
        ("collate_fn", "numpy.save"),  # an installed package, not the user's
    ],
)
def test_a_name_outside_the_users_code_is_refused(tmp_path: Path, key: str, path: str) -> None:
    exported = _export(tmp_path, **{key: path})
    with pytest.raises(ConfigError, match=rf"^loader\.{key}={path}: names the .*Fix: pass trust="):
        build_dataloader(Ints(), exported, device="cpu")  # refused before a loader exists


def test_torchs_collates_and_the_users_own_code_pass(
    tmp_path: Path, fixtures_on_path: Path
) -> None:
    for path in ("torch.utils.data.default_collate", "torch.utils.data.dataloader.default_collate"):
        exported = _export(tmp_path, collate_fn=path)
        assert next(iter(build_dataloader(Ints(), exported, device="cpu"))).tolist() == [[0], [1]]
    convert = _export(tmp_path, collate_fn="torch.utils.data.default_convert")
    assert [t.tolist() for t in next(iter(build_dataloader(Ints(), convert, device="cpu")))] == [
        [0],
        [1],
    ]
    own = _export(tmp_path, collate_fn="user_steps.lambda_collate")  # the user's module
    assert next(iter(build_dataloader(Ints(), own, device="cpu"))).tolist() == [[0], [1]]


@pytest.mark.parametrize(
    ("path", "names"),
    [
        ("torch.utils.collect_env.run", "the installed package torch"),  # hands its str to Popen
        ("torch.hub.load", "the installed package torch"),
        ("loadertune.loader.to_device", "the installed package loadertune"),  # editable, not yours
        ("hydra_plugins.loadertune_sweeper.config.SweeperConfig", "the installed package hydra_"),
    ],
)
def test_the_rest_of_torch_and_loadertune_itself_are_not_trusted(
    tmp_path: Path, path: str, names: str
) -> None:
    exported = _export(tmp_path, collate_fn=path)
    with pytest.raises(ConfigError, match=rf"^loader\.collate_fn={re.escape(path)}: names {names}"):
        build_dataloader(Ints(), exported, device="cpu")


def test_a_user_module_re_exporting_loadertune_lends_it_no_trust(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "own_reexport.py").write_text("from loadertune.loader import to_device as move\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "own_reexport", raising=False)
    exported = _export(tmp_path, collate_fn="own_reexport.move")
    with pytest.raises(ConfigError, match=r"names loadertune\.loader\._build\.to_device, defined"):
        build_dataloader(Ints(), exported, device="cpu")


def test_trust_or_an_allow_list_lets_a_name_through(tmp_path: Path) -> None:
    exported = _export(tmp_path, collate_fn="builtins.list")  # harmless: a list of the items
    for trust in (True, ["builtins.list"], ["builtins."]):
        batch = next(iter(build_dataloader(Ints(), exported, device="cpu", trust=trust)))
        assert [int(t) for t in batch] == [0, 1]
    with pytest.raises(ConfigError, match=r"builtins\.list"):
        build_dataloader(Ints(), exported, device="cpu", trust=["builtins.lis"])  # no prefix


@pytest.mark.parametrize(
    ("path", "defined"),
    [
        ("torch.utils.cpp_extension.subprocess.getoutput", "subprocess.getoutput"),
        ("torch.os.system", f"{os.system.__module__}.system"),
        ("torch.utils.data._utils.collate.re.compile", "re.compile"),
    ],
)
def test_a_name_reached_through_torch_is_judged_where_it_is_defined(
    tmp_path: Path, path: str, defined: str
) -> None:
    exported = _export(tmp_path, collate_fn=path)
    torchs = r"names the installed package torch, not your own code"
    with pytest.raises(ConfigError, match=rf"^loader\.collate_fn={re.escape(path)}: {torchs}"):
        build_dataloader(Ints(), exported, device="cpu")  # not one of PyTorch's collates
    names = rf"names {re.escape(defined)}, defined in the standard library, not your own code"
    with pytest.raises(ConfigError, match=rf"^loader\.collate_fn={re.escape(path)}: {names}"):
        build_dataloader(Ints(), exported, device="cpu", trust=["torch."])  # torch's, not posix's
    with pytest.raises(ConfigError, match=r"trust=\['" + re.escape(path) + r"'\] to allow"):
        build_dataloader(Ints(), exported, device="cpu", trust=["torch."])


def _own_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A user's module on sys.path that imports os and subprocess and re-exports torch's."""
    name = "own_loader_code"
    (tmp_path / f"{name}.py").write_text(
        "import os\nimport subprocess\n\nimport torch\n"
        "from torch.utils.data import default_collate\n\n"
        "run = subprocess.getoutput\n\n\n"
        "def stack(items):\n    return torch.stack(items)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return name


def test_the_users_own_module_lends_no_trust_to_what_it_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = _own_module(tmp_path, monkeypatch)
    for path, defined in ((f"{own}.os.system", f"{os.system.__module__}.system"),
                          (f"{own}.run", "subprocess.getoutput")):  # fmt: skip
        exported = _export(tmp_path, worker_init_fn=path)
        with pytest.raises(ConfigError, match=rf"names {re.escape(defined)}, defined in the st"):
            build_dataloader(Ints(), exported, device="cpu")
    for name in ("stack", "default_collate"):  # its own code, and torch's re-exported
        exported = _export(tmp_path, collate_fn=f"{own}.{name}")
        assert next(iter(build_dataloader(Ints(), exported, device="cpu"))).tolist() == [[0], [1]]


def test_a_name_allowed_exactly_is_resolved_but_a_prefix_judges_the_definition(
    tmp_path: Path,
) -> None:
    exported = _export(tmp_path, collate_fn="torch.os.getcwd")  # built, never iterated
    loader = build_dataloader(Ints(), exported, device="cpu", trust=["torch.os.getcwd"])
    assert loader.collate_fn is os.getcwd
    with pytest.raises(ConfigError, match=r"names posix\.getcwd|names nt\.getcwd"):
        build_dataloader(Ints(), exported, device="cpu", trust=["torch.os"])


def test_an_untrusted_top_level_module_is_refused_before_it_is_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, "this", raising=False)  # stdlib's; prints when imported
    with pytest.raises(ConfigError, match=r"^loader\.collate_fn=this\.s: names the standard"):
        build_dataloader(Ints(), _export(tmp_path, collate_fn="this.s"), device="cpu")
    assert "this" not in sys.modules


def test_the_examples_collate_and_worker_init_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    exported = _export(
        tmp_path, collate_fn="varlen.data.pad_collate", worker_init_fn="varlen.data.seed_worker"
    )
    inputs, targets = next(iter(build_dataloader(Ints(), exported, device="cpu")))
    assert inputs.shape == targets.shape == (2, 0)  # one-token items: no next-token pairs
