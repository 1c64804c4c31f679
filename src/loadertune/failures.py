"""How a trial can fail, in one documented vocabulary, and how to tell which way it failed.

Each failing trial ends with exactly one reason. Settings that cannot work on this machine
(too little memory or shared memory, too few file descriptors, a config PyTorch refuses) are
*infeasible*: the sweep records them PRUNED so Optuna's samplers learn to avoid them (samplers
ignore FAIL trials and would propose them again). Everything else is a *crash*, recorded FAIL.
The message patterns are PyTorch's own texts (see ``shared/design/failures.md``); matching
uses their stable prefixes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

REASONS: dict[str, str] = {
    "shm_exhausted": "/dev/shm too small for the batches in flight (a worker died of SIGBUS)",
    "worker_oom": "a DataLoader worker was killed by the kernel (out of memory)",
    "trial_killed": "the trial's own process was killed (exit by SIGKILL, no Python error)",
    "memory_budget": "the trial's process tree grew past the memory budget and was stopped",
    "fd_exhausted": "too many open file descriptors for the workers' shared-memory handles",
    "timeout": "the trial hung: no progress within its limit; its process group was killed",
    "worker_crashed": "a DataLoader worker segfaulted or exited unexpectedly",
    "dataset_error": "the dataset raised an exception (a bug in it, whatever the settings)",
    "unpicklable": "the dataset cannot be pickled for the spawn/forkserver start method",
    "invalid_config": "a setting PyTorch or loadertune refuses (checked before workers start)",
    "cuda_oom": "the batch or model does not fit in the accelerator's memory",
    "interrupted": "the sweep was interrupted (Ctrl-C, or its process died) during the trial",
    "trial_crashed": "the trial's process exited with an error status and no Python error",
    "rank_failed": "a rank of a multi-rank trial died without a Python error (or never started)",
}

INFEASIBLE = frozenset(
    {
        "shm_exhausted",
        "worker_oom",
        "memory_budget",
        "fd_exhausted",
        "invalid_config",
        "cuda_oom",
        "unpicklable",
    }
)


@dataclass(frozen=True)
class _Rule:
    reason: str
    pattern: re.Pattern[str]


_RULES = [
    _Rule(
        "shm_exhausted",
        re.compile(
            r"killed by signal: Bus error|out of shared memory|"
            r"No space left on device.*shm|shm.*No space left"
        ),
    ),
    _Rule("worker_oom", re.compile(r"DataLoader worker \(pid \d+\) is killed by signal: Killed")),
    _Rule("fd_exhausted", re.compile(r"Too many open files")),
    _Rule(
        "worker_crashed",
        re.compile(
            r"killed by signal: Segmentation fault|"
            r"DataLoader worker \(pid\(s\) [^)]*\) exited unexpectedly|"
            r"is killed by signal"
        ),
    ),
    _Rule("cuda_oom", re.compile(r"OutOfMemoryError|CUDA out of memory")),
    # Host memory refused to the process (ulimit -v, cgroup): a setting too large, not a bug.
    _Rule(
        "memory_budget",
        re.compile(
            r"(^|\W)MemoryError\b|Cannot allocate memory|DefaultCPUAllocator: can't allocate"
        ),
    ),
    _Rule(
        "unpicklable",
        re.compile(
            r"PicklingError|Can't pickle|Can't get local object|"
            r"cannot pickle"
        ),
    ),
]


def classify(exc_type: str, text: str) -> str:
    """The reason for a trial that raised ``exc_type`` with traceback/message ``text``."""
    if exc_type == "ConfigError":
        return "invalid_config"
    if exc_type in ("InfeasibleSetting", "TrialFailure"):
        # The last ``[reason]``: the failure's own line comes after any chained cause.
        named = [str(r) for r in re.findall(r"\[(\w+)\]", text) if r in REASONS]
        if named:
            return named[-1]
    for rule in _RULES:
        if rule.pattern.search(text):
            return rule.reason
    return "dataset_error"


def classify_exit(exitcode: int | None) -> str:
    """The reason for a trial process that ended without reporting an error."""
    if exitcode is not None and exitcode < 0:
        return "trial_killed"
    return "trial_crashed"


class TrialFailure(RuntimeError):
    """A trial stopped by one of its own guards, with its reason (one of :data:`REASONS`).

    The text opens with ``[reason]`` so :func:`classify` reads it back from a traceback.
    """

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        self.message = message
        super().__init__(f"[{reason}] {message}")


class InfeasibleSetting(TrialFailure):
    """A setting predicted to break a resource guard; raised before any worker starts."""
