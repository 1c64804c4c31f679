"""A ``best_loader.yaml`` names callables by dotted path; ``build_dataloader`` resolves only the
user's own modules and ``torch``'s unless told to trust more: a file naming ``os.system`` or
``subprocess.getoutput`` as its collate is refused before anything is called."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import Dataset

from loadertune import build_dataloader
from loadertune.errors import ConfigError


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


def test_torch_and_the_users_own_code_pass(tmp_path: Path, fixtures_on_path: Path) -> None:
    exported = _export(tmp_path, collate_fn="torch.utils.data.default_collate")
    assert next(iter(build_dataloader(Ints(), exported, device="cpu"))).tolist() == [[0], [1]]
    own = _export(tmp_path, collate_fn="user_steps.lambda_collate")  # the user's module
    assert next(iter(build_dataloader(Ints(), own, device="cpu"))).tolist() == [[0], [1]]


def test_trust_or_an_allow_list_lets_a_name_through(tmp_path: Path) -> None:
    exported = _export(tmp_path, collate_fn="builtins.list")  # harmless: a list of the items
    for trust in (True, ["builtins.list"], ["builtins."]):
        batch = next(iter(build_dataloader(Ints(), exported, device="cpu", trust=trust)))
        assert [int(t) for t in batch] == [0, 1]
    with pytest.raises(ConfigError, match=r"builtins\.list"):
        build_dataloader(Ints(), exported, device="cpu", trust=["builtins.lis"])  # no prefix
