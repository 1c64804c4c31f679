"""A user's own code named by dotted paths, resolved and tried once before anything starts.

``model._target_`` (a step factory), ``loader.collate_fn`` and ``loader.worker_init_fn`` name
callables in the user's package. Each way they can fail becomes one line naming the key and
the fix, before a worker starts, an MLflow run opens or an Optuna trial is told: a path that
does not import or is not callable; a collate that fails on the dataset's first items; a
factory that raises or returns neither a step callable nor a ``torch.nn.Module``; under the
``spawn`` and ``forkserver`` start methods, a callable the workers cannot be sent.

The factory is tried on the CPU with a sample batch (the collate applied to the first items)
so that a sweep's parent process never initialises CUDA, which its forked trials need; the
trial calls it again on its own device (:mod:`loadertune.models`). A check that passed is not
repeated in the same process, so validating every trial of a sweep stays cheap.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import multiprocessing
import pickle
import site
import sys
import sysconfig
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from loadertune import datasets, models
from loadertune._lazy import torch, torch_data
from loadertune._torch_private import COLLATE_MODULE
from loadertune.config import (
    CustomModelConfig,
    LoaderConfig,
    RunConfig,
    SimulatedModelConfig,
    StorageConfig,
    resolve,
)
from loadertune.errors import ConfigError
from loadertune.storage import StorageSession

CHECK_ITEMS = 4
"""Items the collate is tried on (fewer when the batch or the dataset is smaller)."""

PICKLING_METHODS = ("spawn", "forkserver")
"""Start methods that send the collate, ``worker_init_fn`` and dataset to workers by pickle."""

_CHECKED: set[str] = set()


Trust = bool | Iterable[str]
"""Which dotted paths a loader config may name: True, any; False, the user's own modules and
PyTorch's collates (:data:`TRUSTED_CALLABLES`); an iterable of prefixes (``"transformers."``,
``"mypkg.collate.pad"``), those too."""

TRUSTED_CALLABLES = frozenset(
    f"{COLLATE_MODULE}.{name}" for name in ("default_collate", "default_convert")
)
"""Installed code a config may name without being trusted, by where it is defined: PyTorch's
collates. Not the rest of ``torch``, whose helpers reach a shell
(``torch.utils.collect_env.run``)."""

TRUSTED_PATHS = frozenset(
    f"{module}.{name}"
    for module in (
        "torch.utils.data",
        "torch.utils.data.dataloader",
        COLLATE_MODULE,
    )
    for name in ("default_collate", "default_convert")
)
"""The spellings of :data:`TRUSTED_CALLABLES` that are imported before judging what they name."""

NEVER_THE_USERS = ("loadertune", "hydra_plugins")
"""Top-level packages that are no user's own code, even installed editable (as in development):
loadertune's own helpers start processes and write files."""


def loader_callables(loader: LoaderConfig, trust: Trust = True) -> dict[str, Callable[..., Any]]:
    """``collate_fn`` and ``worker_init_fn`` resolved, for ``DataLoader`` (unset ones left out),
    each checked against ``trust`` (:func:`check_trusted`): a config read from a file could
    otherwise name ``os.system`` or ``subprocess.getoutput``, run in every batch."""
    if not isinstance(trust, bool | str):
        trust = tuple(trust)  # an iterator would be spent on the first path
    paths = {"collate_fn": loader.collate_fn, "worker_init_fn": loader.worker_init_fn}
    return {
        name: check_trusted(f"loader.{name}", path, trust) for name, path in paths.items() if path
    }


def check_exported_callables(settings: Mapping[str, Any], file: str, argv: Sequence[str]) -> None:
    """Refuse a ``collate_fn``/``worker_init_fn`` that a loader file read for ``loader=<name>``
    names, unless ``build_dataloader``'s default trust allows it (:func:`check_trusted`).

    The command line's composed config does not say where a value came from, so the rule is
    on the file: a path in the selected file is checked unless the command line also gives
    that key (``loader.collate_fn=...``), which is the user's own word and trusted as typed.
    A hand-edited ``collate_fn: subprocess.getoutput`` would otherwise run in every batch.

    Raises:
        ConfigError: naming ``loader.<key>``, what the path names and the fix.
    """
    typed = {a.partition("=")[0].lstrip("+~") for a in argv if "=" in a}
    for name in ("collate_fn", "worker_init_fn"):
        path, key = settings.get(name), f"loader.{name}"
        if isinstance(path, str) and path and key not in typed:
            try:
                check_trusted(key, path, False)
            except ConfigError as exc:
                raise ConfigError(
                    key, path, f"read from {file}: {exc.problem}",
                    f"edit {file}, or give it on the command line ({key}={path}) if you "
                    "trust it",
                ) from None  # fmt: skip


def check_trusted(key: str, path: str, trust: Trust) -> Callable[..., Any]:
    """The callable at ``path``, refused unless ``trust`` allows the code it really runs.

    Trusted: code defined in the user's own modules (a top-level module found outside the
    standard library and the installed packages, such as a project on ``PYTHONPATH`` or
    installed editable, but never loadertune's own), PyTorch's collates
    (:data:`TRUSTED_CALLABLES`) or under a prefix in ``trust``; or a path that ``trust``
    lists exactly. Where the callable is defined counts, not the path that reaches
    it: ``mypkg.os.system`` is the standard library's ``posix.system``. A path whose
    top-level module is not trusted is refused before anything is imported.

    Raises:
        ConfigError: naming ``key``, where the code lives and the two ways to allow it; or,
            from :func:`~loadertune.config._targets.resolve`, a path that does not resolve.
    """
    if trust is True:
        return resolve(key, path)
    named = () if trust is False else ((trust,) if isinstance(trust, str) else tuple(trust))
    if path not in TRUSTED_PATHS and not any(_under(path, p) for p in named):
        home = _installed_home(path.partition(".")[0])
        if home is not None:  # refused by its top-level module, before importing it
            raise _untrusted(key, path, f"names {home}")
    found = resolve(key, path)
    if path not in named:  # a name allowed exactly is the caller's call
        _check_defined(key, path, found, named)
    return found


def _check_defined(key: str, path: str, found: Any, allowed: tuple[str, ...]) -> None:
    """Refuse ``found`` unless the module that defines it is the user's own or ``allowed``:
    a trusted module's attributes reach the standard library too (``mypkg.os``)."""
    module = _defining_module(found)
    if module is None:
        raise _untrusted(key, path, f"names a {type(found).__name__} whose module is unknown")
    qualified = f"{module}.{_qualname(found)}"
    if qualified in TRUSTED_CALLABLES or any(_under(qualified, p) for p in allowed):
        return
    home = _installed_home(module.partition(".")[0], unfound="a module that cannot be found")
    if home is not None:
        raise _untrusted(key, path, f"names {qualified}, defined in {home}")


def _under(name: str, prefix: str) -> bool:
    """True when dotted ``name`` is ``prefix`` or lies below it (``"torch."`` or ``"torch"``)."""
    return name == prefix.rstrip(".") or name.startswith(
        prefix if prefix.endswith(".") else f"{prefix}."
    )


def _defining_module(found: Any) -> str | None:
    """The module whose code runs when ``found`` is called: a function's or class's own, a
    callable instance's class's, a builtin method's owner's (None when it cannot be told)."""
    if not (isinstance(found, type) or inspect.isroutine(found)):
        found = type(found)
    module = getattr(found, "__module__", None)
    if isinstance(module, str):
        return module
    owner = getattr(found, "__objclass__", None)  # a method descriptor, as str.join
    if owner is None:
        owner = getattr(found, "__self__", None)  # a builtin bound to a module or an object
        if isinstance(owner, types.ModuleType):
            return owner.__name__
        owner = None if owner is None else type(owner)
    module = getattr(owner, "__module__", None)
    return module if isinstance(module, str) else None


def _qualname(found: Any) -> str:
    """``found``'s name within its module, for the message (its class's for an instance)."""
    if not (isinstance(found, type) or inspect.isroutine(found)):
        found = type(found)
    return str(getattr(found, "__qualname__", None) or getattr(found, "__name__", "?"))


def _untrusted(key: str, path: str, names: str) -> ConfigError:
    """The refusal of an untrusted ``path``: what it names and the two ways to allow it."""
    return ConfigError(
        key, path, f"{names}, not your own code: a loader file could run anything "
        "through it, in every batch",
        f"pass trust=True to build_dataloader if you trust this file, or "
        f"trust=['{path}'] to allow this name",
    )  # fmt: skip


def _installed_home(top: str, unfound: str | None = None) -> str | None:
    """Where an installed top-level module lives (``the standard library``, ``the installed
    package X``), or None for the user's own; one that cannot be found is ``unfound``
    (None before importing: resolve then says it does not import)."""
    if top in sys.builtin_module_names or top in sys.stdlib_module_names:
        return "the standard library"
    if top in NEVER_THE_USERS:
        return f"the installed package {top}"
    origin = _origin(top)
    if origin is None:
        return unfound
    if origin in ("built-in", "frozen"):
        return "the standard library"
    where = Path(origin).resolve()
    paths = sysconfig.get_paths()
    installed = {paths["purelib"], paths["platlib"], *site.getsitepackages()}
    if site.ENABLE_USER_SITE:
        installed.add(site.getusersitepackages())
    if any(where.is_relative_to(Path(p).resolve()) for p in installed):
        return f"the installed package {top}"
    if any(where.is_relative_to(Path(paths[k]).resolve()) for k in ("stdlib", "platstdlib")):
        return "the standard library"
    return None


def _origin(top: str) -> str | None:
    """The file (or folder, for a namespace package) a top-level module is loaded from, or
    ``built-in``/``frozen``; None when it cannot be found. Located, not imported."""
    loaded = getattr(sys.modules.get(top), "__file__", None)
    if loaded:
        return str(loaded)  # already imported: ``__main__`` has a file but no spec
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.origin:
        return spec.origin
    return next(iter(spec.submodule_search_locations or ()), None)


def check_user_code(config: RunConfig) -> None:
    """Resolve and try the user's callables that ``config`` names; nothing to do without any.

    Raises:
        ConfigError: the first callable that cannot work, naming its key and the fix.
    """
    loader, model = config.loader, config.model
    custom = isinstance(model, CustomModelConfig)
    if loader.collate_fn is None and loader.worker_init_fn is None and not custom:
        return
    method = _start_method(loader)
    fingerprint = repr((model, config.dataset, loader.collate_fn, loader.worker_init_fn, method))
    if fingerprint in _CHECKED:
        return
    paths = {f"loader.{name}": getattr(loader, name) for name in ("collate_fn", "worker_init_fn")}
    if isinstance(model, CustomModelConfig):
        paths["model._target_"] = model.target
    named = {key: resolve(key, path) for key, path in paths.items() if path}
    if method in PICKLING_METHODS:
        for key, found in named.items():
            _check_pickles(key, paths[key], found, method)
    if loader.collate_fn is not None or isinstance(model, CustomModelConfig):
        batch = sample_batch(config, named.get("loader.collate_fn"))
        models.samples_in(batch, loader.collate_fn)
        _check_network_inputs(model, batch, loader.collate_fn)
        if isinstance(model, CustomModelConfig):
            models.build_user_step(model, torch.device("cpu"), batch)
    _CHECKED.add(fingerprint)


def _check_network_inputs(model: Any, batch: Any, collate: str | None) -> None:
    """A built-in network takes a tensor of inputs: the batch's first part, refused here
    naming the collate that made it (deep in a forward pass, it would read as a bug)."""
    if isinstance(model, CustomModelConfig | SimulatedModelConfig):
        return  # the user's step takes what it takes; a sleep takes anything
    inputs, _ = models.split_batch(batch)
    if not isinstance(inputs, torch.Tensor):
        raise ConfigError(
            "loader.collate_fn",
            collate,
            f"makes batches whose inputs are a {type(inputs).__name__}, and model={model.name} "
            "takes a tensor",
            "return a tensor, or an (inputs, targets) pair or a dict whose first value is one",
        )


def _start_method(loader: LoaderConfig) -> str | None:
    """How workers would start: the loader's context, else the platform's; None without any."""
    if loader.multiprocessing_context is not None:
        return loader.multiprocessing_context
    if loader.num_workers == 0:
        return None
    return multiprocessing.get_context().get_start_method()


def _check_pickles(key: str, path: str, found: Any, method: str) -> None:
    try:
        pickle.dumps(found)
    except Exception as exc:
        line = (str(exc).strip().splitlines() or [""])[0]
        raise ConfigError(
            key,
            path,
            f"cannot be pickled for {method} workers ({type(exc).__name__}: {line})",
            "define it with def at module level (no lambda or closure), or use "
            "loader.multiprocessing_context=fork",
        ) from None


def sample_batch(config: RunConfig, collate: Callable[..., Any] | None) -> Any:
    """``collate`` (PyTorch's default if None) applied to the dataset's first few items.

    Raises:
        ConfigError: naming ``loader.collate_fn``: the collate raised on those items.
    """
    plain = StorageSession(StorageConfig())  # the files where they are: no copy, no throttle
    dataset = datasets.build_dataset(dataclasses.replace(config, storage=StorageConfig()), plain)

    wanted = max(1, min(CHECK_ITEMS, config.loader.batch_size or 1))
    if datasets.is_iterable(dataset):
        items = datasets.first_items(dataset, wanted)
    else:
        items = [dataset[i] for i in range(min(wanted, len(dataset)))]
    count = len(items)
    path = config.loader.collate_fn
    try:
        return (collate or torch_data.default_collate)(items)
    except Exception as exc:
        line = (str(exc).strip().splitlines() or [""])[0]
        whose = "PyTorch's default collate " if path is None else ""
        fix = (
            "give a collate that pads or stacks these items, e.g. "
            "loader.collate_fn=my_pkg.data.pad_collate"
            if path is None
            else "fix the collate: it gets a list of the dataset's items and returns a batch"
        )
        raise ConfigError(
            "loader.collate_fn",
            path,
            f"{whose}fails on the first {count} items of dataset={config.dataset.name} "
            f"({type(exc).__name__}: {line})",
            fix,
        ) from None
