"""Where loadertune goes past PyTorch's public DataLoader API: one function each, with why.

A DataLoader's iterator owns its worker processes, but PyTorch exposes neither them nor a way
to stop them before garbage collection, nor a switch for its SIGCHLD handler (which raises a
dead worker's error in the main thread, wherever it happens to be). Trials must stop and kill
workers on their own terms, and AutoLoader must swap loaders mid-training, so these reach the
iterator's private attributes; everything else goes through ``torch.utils.data``'s public API.
The readers take any object (an iterator without workers, or None) and then find nothing.
Torch is imported only inside the functions.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import threading
import time
import warnings
from typing import Any

from loadertune._lazy import torch_data

COLLATE_MODULE = "torch.utils.data._utils.collate"
"""Where PyTorch defines ``default_collate`` and ``default_convert`` (their ``__module__``).

The trust rule judges a callable by where it is defined, and PyTorch's public
``torch.utils.data`` only re-exports these two from this private module."""


def persistent_iterator(loader: Any) -> Any:
    """The iterator a ``persistent_workers`` loader keeps between epochs, or None.

    ``DataLoader._iterator``: the loader reuses it on each ``iter()``; it is the only handle
    on the workers that live between epochs.
    """
    return getattr(loader, "_iterator", None)


def forget_persistent_iterator(loader: Any) -> None:
    """Drop the loader's kept iterator, so the next ``iter()`` starts fresh workers.

    ``DataLoader._iterator``: there is no public reset once its workers were shut down.
    """
    loader._iterator = None


def worker_processes(it: Any) -> list[Any]:
    """An iterator's worker ``multiprocessing.Process`` objects (none without workers).

    ``_workers``: PyTorch gives a worker's identity only inside it (``get_worker_info``); the
    training process has no public list of its workers' pids, exit codes or liveness.
    """
    return list(getattr(it, "_workers", []))


def shutdown_workers(it: Any) -> None:
    """Stop an iterator's workers now (PyTorch's own orderly shutdown); nothing without them.

    ``_shutdown_workers``: publicly the workers stop only when the iterator is collected.
    """
    shutdown = getattr(it, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()
        join_index_feeders(it)


FEEDER_JOIN_S = 1.0
"""Longest wait, all queues together, for the feeder threads of a shut-down iterator."""


def join_index_feeders(it: Any, timeout_s: float = FEEDER_JOIN_S) -> None:
    """Wait for the threads that fed the iterator's index queues to end.

    ``_index_queues`` (PyTorch) and each ``multiprocessing.Queue``'s ``_thread``: PyTorch
    closes the queues with ``cancel_join_thread``, so their feeder threads end on their own
    a moment later. A fork in that moment (the next loader's workers) can leave the new
    worker stuck for ever in CPython 3.11's after-fork code, waiting on the interpreter's
    thread-list lock the ending thread held (seen: a 2-rank Lightning run under load whose
    worker never started). Joining them first closes that window; a feeder blocked on a
    dead worker's full pipe is waited for at most ``timeout_s`` in all.
    """
    deadline = time.monotonic() + timeout_s
    for queue in getattr(it, "_index_queues", []):
        feeder = getattr(queue, "_thread", None)
        if feeder is not None and feeder is not threading.current_thread():
            feeder.join(max(0.0, deadline - time.monotonic()))


def set_timeout(it: Any, timeout_s: float) -> None:
    """Give a running iterator a new batch timeout.

    ``_timeout``: the iterator copies ``DataLoader.timeout`` when it starts, and a persistent
    iterator reuses that copy every epoch, so setting the loader's attribute does not reach it.
    """
    it._timeout = timeout_s


def unwatch_workers(it: Any) -> None:
    """Take an iterator's workers off PyTorch's SIGCHLD handler; they may now die quietly.

    ``signal_handling._remove_worker_pids`` and ``_worker_pids_set``: the handler raises
    "DataLoader worker ... is killed by signal" in the main thread when a watched worker dies;
    there is no public switch.
    """
    if getattr(it, "_worker_pids_set", False):
        torch_data._utils.signal_handling._remove_worker_pids(id(it))  # type: ignore[attr-defined]
        it._worker_pids_set = False


def watch_workers(it: Any) -> None:
    """Put an iterator's workers (back) under PyTorch's SIGCHLD handler, as ``iter()`` does.

    ``signal_handling._set_worker_pids`` and ``_worker_pids_set``: undoes
    :func:`unwatch_workers`; PyTorch registers workers only when it starts them.
    """
    if not getattr(it, "_worker_pids_set", True):
        pids = tuple(w.pid for w in worker_processes(it))
        torch_data._utils.signal_handling._set_worker_pids(id(it), pids)  # type: ignore[attr-defined]
        it._worker_pids_set = True


def unwatch_all_workers() -> None:
    """Take the workers of every multi-process iterator alive in this process off the handler.

    ``dataloader._MultiProcessingDataLoaderIter``: the class of an iterator with workers is not
    exported; a trial about to kill its workers finds their iterators through the collector.
    """
    with contextlib.suppress(Exception), warnings.catch_warnings():  # best effort
        warnings.simplefilter("ignore")  # isinstance() on deprecated torch objects warns
        for obj in gc.get_objects():
            if isinstance(obj, torch_data.dataloader._MultiProcessingDataLoaderIter):
                unwatch_workers(obj)


def import_dynamo() -> None:
    """Import ``torch._dynamo``, which PyTorch imports on an optimizer's first use
    (``torch._compile._disable_dynamo``): a sweep imports it once before forking its trials,
    so no trial pays the import (:mod:`hydra_plugins.loadertune_sweeper.trial._warm_parent`).
    """
    importlib.import_module("torch._dynamo")
