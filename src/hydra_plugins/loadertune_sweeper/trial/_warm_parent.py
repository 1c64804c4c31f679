"""Make the sweep process a warm parent for its trial processes.

Each trial runs in a process forked from the sweep (:mod:`._trial_process`), so what the
sweep has imported a trial inherits for free, and what it has not, every trial imports
again. The trial's own path imports more than the sweep needs: PyTorch's optimizers pull in
``torch._dynamo`` when the first optimizer is built (about 2.3 s on a 2-core machine, paid by
every trial), and the dataset, model, storage and timing modules of ``loadertune`` are
imported lazily on the first trial. :func:`warm_parent` imports them once in the sweep, before
the first fork, so each trial starts from a process that has: isolation is unchanged (a crash
or an OOM kill still ends only that trial's process group), the fixed cost is paid once.

Nothing here initialises CUDA, starts a thread pool or touches the dataset: a fork after
CUDA is initialised cannot use it, and a fork of a process with running OpenMP threads may
hang. For that reason the user's own modules (``dataset=custom``, ``model=custom``, a
``collate_fn``) are left to the trial: one that builds a tensor on the GPU at import would
leave every later fork without CUDA. A module here that fails to import is left to the
trial too, which reports it as its error with the traceback.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from loadertune import _torch_private

if TYPE_CHECKING:
    from loadertune.config import RunConfig

# What every trial imports on its way to the first timed step, heaviest first.
_TRIAL_PATH = (
    "torch.optim",
    "torch.utils.data",
    "numpy",
    "PIL.Image",
    "loadertune.trial",
    "loadertune.loader._workload",
    "loadertune.loader._step_loop",
    "loadertune.machine._tree_sampler",
    "loadertune.measure._accelerator",
    "loadertune.machine._host",
    "loadertune.checks._preflight",
    "loadertune.loader._build",
    "loadertune.storage",
    "loadertune.storage._page_cache",
    "loadertune.datasets",
    "loadertune.datasets._build",
    "loadertune.datasets.iterable",
    "loadertune.models",
    "loadertune.models._steps",
    "loadertune.models._vision",
)
# The module a built-in dataset or model adds to that path.
_DATASET_MODULES = {
    "synthetic_images": "loadertune.datasets.image_folder",
    "image_folder": "loadertune.datasets.image_folder",
    "array_shards": "loadertune.datasets.array_shards",
    "tokens": "loadertune.datasets.tokens",
    "webdataset": "loadertune.datasets.tar_shards",
    "hf_iterable": "loadertune.datasets.hf_iterable",
}
_MODEL_MODULES = {"transformer": "loadertune.models._transformer"}

_warmed: set[str] = set()


def warm_parent(config: RunConfig) -> None:
    """Import, here and once, what a trial of ``config`` imports.

    Called before each trial is forked; a module already imported costs nothing, so only
    the first call (and a later trial naming another module) pays.
    """

    if not _warmed:  # an optimizer's first use imports it: 2.3 s of every trial here
        with contextlib.suppress(Exception):
            _torch_private.import_dynamo()
    for name in (*_TRIAL_PATH, *_modules_of(config)):
        if name in _warmed:
            continue
        _warmed.add(name)
        # A module that cannot be imported here is the trial's to report, with its traceback.
        with contextlib.suppress(Exception):
            importlib.import_module(name)


def _modules_of(config: RunConfig) -> Iterable[str]:
    """The built-in modules the dataset and the model add to the trial's path."""
    for name, modules in (
        (config.dataset.name, _DATASET_MODULES),
        (config.model.name, _MODEL_MODULES),
    ):
        if name in modules:
            yield modules[name]
