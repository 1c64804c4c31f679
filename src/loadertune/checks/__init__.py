"""Checks made before anything starts: each failure names the config key and the fix.

Rooms (the names other packages use are re-exported below, each room imported on the first
use of one of its names, so importing the package imports none of them):

- ``_host_lock``: one timing process per host: a lock that a second sweep or trial waits on or is
  refused by.
- ``_preflight``: predict, before any worker starts, settings that would exhaust memory, /dev/shm
  or descriptors.
- ``_resolvers``: OmegaConf resolvers the configs use, registered before Hydra composes anything.
- ``_shards``: the shard arithmetic of a streaming dataset, checked before any worker starts.
- ``_user_code``: a user's own code named by dotted paths, resolved and tried once before anything
  starts.
- ``_validation``: checks that run before anything starts: each failure names the config key and
  the fix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadertune._lazy import lazy_package

__all__ = [
    "Batch",
    "HostBusy",
    "Shards",
    "Trust",
    "WorkerCap",
    "check_exported_callables",
    "check_lock_dir",
    "check_mode",
    "check_worker_count",
    "loader_callables",
    "register_resolvers",
    "shard_limit",
    "timing_lock",
    "validate",
    "validate_loader",
    "worker_cap",
    "worker_mb",
]

if TYPE_CHECKING:
    from loadertune.checks._host_lock import HostBusy, check_lock_dir, check_mode, timing_lock
    from loadertune.checks._preflight import (
        Batch,
        WorkerCap,
        check_worker_count,
        worker_cap,
        worker_mb,
    )
    from loadertune.checks._resolvers import register as register_resolvers
    from loadertune.checks._shards import Shards, shard_limit
    from loadertune.checks._user_code import Trust, check_exported_callables, loader_callables
    from loadertune.checks._validation import validate, validate_loader

__getattr__ = lazy_package(__name__, __file__)
