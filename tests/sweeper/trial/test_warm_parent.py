"""The sweep as a warm parent: a trial's import path is imported once, in the sweep process,
before the first trial is forked, and nothing that would spoil a fork (CUDA) is started."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

from omegaconf import DictConfig

from loadertune.config._typed import to_run_config

_CHECK = textwrap.dedent(
    """
    import os, pickle, sys
    from hydra_plugins.loadertune_sweeper.trial import _warm_parent

    config = pickle.loads(open(sys.argv[1], "rb").read())
    before = {m for m in ("torch._dynamo", "loadertune.datasets.tokens", "loadertune.trial")
              if m in sys.modules}
    _warm_parent._TRIAL_PATH = (*_warm_parent._TRIAL_PATH, "no_such_module_for_loadertune")
    _warm_parent.warm_parent(config)
    import torch
    pid = os.fork()
    if pid == 0:  # a trial process: what it needs is there without importing it
        needed = ("torch._dynamo", "torch.optim", "loadertune.datasets.tokens", "loadertune.trial")
        os._exit(0 if all(m in sys.modules for m in needed) else 3)
    _, status = os.waitpid(pid, 0)
    print(sorted(before), os.waitstatus_to_exitcode(status), torch.cuda.is_initialized(),
          "loadertune.datasets.image_folder" in sys.modules)
    """
)


def test_the_sweep_imports_a_trials_path_once_and_its_forks_inherit_it(
    tmp_path: Path, compose: Callable[[Sequence[str]], DictConfig]
) -> None:
    config = to_run_config(compose(["dataset=tokens", "model=simulated"]))
    (tmp_path / "config.pkl").write_bytes(pickle.dumps(config))
    out = subprocess.run(
        [sys.executable, "-c", _CHECK, str(tmp_path / "config.pkl")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    # Not imported by the sweeper's own modules; imported by warm_parent, a module that cannot
    # be imported set aside; the fork has them all; CUDA untouched; another dataset's module
    # left out.
    assert out.stdout.split() == ["[]", "0", "False", "False"], out.stdout
