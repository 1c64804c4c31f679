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
import signal
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from loadertune.errors import ExitStatus


class Reason(str, Enum):
    """Why a trial failed: a ``str`` equal to its value, the word stored in Optuna and MLflow.

    ``str()`` and f-strings give the value (as ``enum.StrEnum`` does, which Python 3.10 lacks).
    Stores are given ``str(reason)``: OmegaConf would write a member by its name, and YAML
    dumpers refuse it.
    """

    SHM_EXHAUSTED = "shm_exhausted"
    WORKER_OOM = "worker_oom"
    TRIAL_KILLED = "trial_killed"
    MEMORY_BUDGET = "memory_budget"
    FD_EXHAUSTED = "fd_exhausted"
    TIMEOUT = "timeout"
    WORKER_CRASHED = "worker_crashed"
    DATASET_ERROR = "dataset_error"
    STEP_ERROR = "step_error"
    UNPICKLABLE = "unpicklable"
    INVALID_CONFIG = "invalid_config"
    CUDA_OOM = "cuda_oom"
    INTERRUPTED = "interrupted"
    TRIAL_CRASHED = "trial_crashed"
    RANK_FAILED = "rank_failed"
    INTERNAL_ERROR = "internal_error"

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(self, spec)


REASONS: dict[Reason, str] = {
    Reason.SHM_EXHAUSTED: "/dev/shm too small for the batches in flight (a worker died of SIGBUS)",
    Reason.WORKER_OOM: "a DataLoader worker was killed by the kernel (out of memory)",
    Reason.TRIAL_KILLED: "the trial's own process was killed (exit by SIGKILL, no Python error)",
    Reason.MEMORY_BUDGET: "the trial's process tree grew past the memory budget and was stopped",
    Reason.FD_EXHAUSTED: "too many open file descriptors for the workers' shared-memory handles",
    Reason.TIMEOUT: "the trial hung: no progress within its limit; its process group was killed",
    Reason.WORKER_CRASHED: "a DataLoader worker segfaulted or exited unexpectedly",
    Reason.DATASET_ERROR: "the dataset raised an exception (a bug in it, whatever the settings)",
    Reason.STEP_ERROR: "the training step raised an exception (a bug in the model or step code)",
    Reason.UNPICKLABLE: "the dataset cannot be pickled for the spawn/forkserver start method",
    Reason.INVALID_CONFIG: "a setting PyTorch or loadertune refuses (checked before workers start)",
    Reason.CUDA_OOM: "the batch or model does not fit in the accelerator's memory",
    Reason.INTERRUPTED: "the sweep was interrupted (Ctrl-C, or its process died) during the trial",
    Reason.TRIAL_CRASHED: "the trial's process exited with an error status and no Python error",
    Reason.RANK_FAILED: "a rank of a multi-rank trial died with no Python error (or never started)",
    Reason.INTERNAL_ERROR: "loadertune itself raised: a bug in loadertune, not in the dataset, "
    "the step or a setting",
}

USER_BUGS = frozenset({Reason.DATASET_ERROR, Reason.STEP_ERROR})
"""Errors in the user's code, whatever the loader settings."""

RECURRING = USER_BUGS | {Reason.INTERNAL_ERROR}
"""Errors no loader setting causes or cures: the same one twice stops a sweep."""

INFEASIBLE = frozenset(
    {
        Reason.SHM_EXHAUSTED,
        Reason.WORKER_OOM,
        Reason.MEMORY_BUDGET,
        Reason.FD_EXHAUSTED,
        Reason.INVALID_CONFIG,
        Reason.CUDA_OOM,
        Reason.UNPICKLABLE,
    }
)


@dataclass(frozen=True)
class _Rule:
    reason: Reason
    pattern: re.Pattern[str]


_RULES = [
    _Rule(
        Reason.SHM_EXHAUSTED,
        re.compile(
            r"killed by signal: Bus error|out of shared memory|"
            r"No space left on device.*shm|shm.*No space left"
        ),
    ),
    _Rule(
        Reason.WORKER_OOM, re.compile(r"DataLoader worker \(pid \d+\) is killed by signal: Killed")
    ),
    _Rule(Reason.FD_EXHAUSTED, re.compile(r"Too many open files")),
    _Rule(
        Reason.WORKER_CRASHED,
        re.compile(
            r"killed by signal: Segmentation fault|"
            r"DataLoader worker \(pid\(s\) [^)]*\) exited unexpectedly|"
            r"is killed by signal"
        ),
    ),
    _Rule(Reason.CUDA_OOM, re.compile(r"OutOfMemoryError|CUDA out of memory")),
    # Host memory refused to the process (ulimit -v, cgroup): a setting too large, not a bug.
    _Rule(
        Reason.MEMORY_BUDGET,
        re.compile(
            r"(^|\W)MemoryError\b|Cannot allocate memory|DefaultCPUAllocator: can't allocate"
        ),
    ),
    _Rule(
        Reason.UNPICKLABLE,
        re.compile(
            r"PicklingError|Can't pickle|Can't get local object|"
            r"cannot pickle"
        ),
    ),
]


def classify(exc_type: str, text: str) -> Reason:
    """The reason for a trial that raised ``exc_type`` with traceback/message ``text``."""
    if exc_type == "ConfigError":
        return Reason.INVALID_CONFIG
    if exc_type in ("InfeasibleSetting", "TrialFailure"):
        # The last ``[reason]``: the failure's own line comes after any chained cause.
        named = [Reason(r) for r in re.findall(r"\[(\w+)\]", text) if r in REASONS]
        if named:
            return named[-1]
    for rule in _RULES:  # before a step error: a step out of memory is the setting's limit
        if rule.pattern.search(text):
            return rule.reason
    if exc_type == "StepError" or f"[{Reason.STEP_ERROR}]" in text:
        return Reason.STEP_ERROR
    if raised_inside_loadertune(text):
        return Reason.INTERNAL_ERROR
    return Reason.DATASET_ERROR


_SRC = Path(__file__).resolve().parents[2]
_HOMES = (_SRC / "loadertune", _SRC / "hydra_plugins" / "loadertune_sweeper")
_DATASETS = _SRC / "loadertune" / "datasets"
_DATA_FAULTS = re.compile(
    r"(\w+\.)*(ValueError|IndexError|KeyError|EOFError|\w*Decode\w*Error|"
    r"OSError|IOError|FileNotFoundError|FileExistsError|PermissionError|IsADirectoryError)$"
)


def raised_inside_loadertune(text: str) -> bool:
    """Whether the error in traceback ``text`` was raised by loadertune's own code: its
    innermost frame (a worker's original one, when the text embeds it) is in loadertune's
    packages. A built-in dataset's frame counts only for an error no data can cause (a
    ``ValueError`` or an ``OSError`` there is the data's: a short or missing file). Such a
    failure is loadertune's bug, never the dataset's or the step's."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    frames = [m for line in lines if (m := _FRAME.match(line))]
    if not frames:
        return False
    where = Path(frames[-1]["file"])
    if not any(where.is_relative_to(home) for home in _HOMES):
        return False
    kind = m.group("type") if (m := _EXC.match(lines[-1].strip())) else ""
    return not (where.is_relative_to(_DATASETS) and _DATA_FAULTS.match(kind))


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_EXC = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)?)(:|$)")


def error_signature(text: str) -> str:
    """An error's type and the place that raised it, without its message.

    ``ValueError at faulty_data.py:42 in __getitem__`` for both ``corrupt record at index
    1468`` and ``… 746``: a message that names an index, a path or a size still groups with
    its kin. The place is the innermost frame of the traceback (a DataLoader worker's
    original traceback is embedded in the re-raised message, and a rank's in its trial's
    failure, so their frames come last); without a traceback, the last line stands alone.
    A sweep stops on the same signature twice (a bug in the user's code); a single trial
    names it in its last line.
    """
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return "?"
    frames = [m for line in lines if (m := _FRAME.match(line))]
    last = lines[-1].strip()
    kind = m.group("type") if (m := _EXC.match(last)) else last
    if not frames:
        return kind
    where = frames[-1]
    return f"{kind} at {Path(where['file']).name}:{where['line']} in {where['func']}"


def worker_death(exitcodes: Iterable[int | None]) -> Reason | None:
    """The reason DataLoader workers that ended with ``exitcodes`` died, None if none died.

    PyTorch names the signal only when its SIGCHLD handler sees the death first; when its own
    liveness check does (a worker killed while the loader waited on a quiet queue), it says
    "exited unexpectedly" and nothing more. The exit status still holds the signal: SIGKILL is
    the kernel's out-of-memory killer's, SIGBUS a full ``/dev/shm``'s, anything else a crash.
    """
    died = [code for code in exitcodes if code is not None and code != 0]
    if not died:
        return None
    if -signal.SIGBUS in died:
        return Reason.SHM_EXHAUSTED
    if -signal.SIGKILL in died:
        return Reason.WORKER_OOM
    return Reason.WORKER_CRASHED


def classify_exit(exitcode: int | None) -> Reason:
    """The reason for a trial process that ended without reporting an error."""
    if exitcode is not None and exitcode < 0:
        return Reason.TRIAL_KILLED
    return Reason.TRIAL_CRASHED


class TrialFailure(RuntimeError):
    """A trial stopped by one of its own guards, with its :class:`Reason`.

    The text opens with ``[reason]`` so :func:`classify` reads it back from a traceback.
    """

    def __init__(self, reason: Reason, message: str) -> None:
        self.reason = reason
        self.message = message
        super().__init__(f"[{reason}] {message}")

    @property
    def exit_status(self) -> ExitStatus:
        """How a command that ends on it exits (:func:`failed_status`)."""
        return failed_status(self.reason)


class RankRaised(TrialFailure):
    """A rank of a multi-rank trial raised: ``who`` (``rank 1 of 2``) and the rank's own
    traceback (``trace``, its last line the error) after the message's first line, so a
    sweep groups it by its innermost place as a trial of one rank would."""

    def __init__(self, reason: Reason, who: str, said: str, trace: str) -> None:
        self.who = who
        self.trace = trace.rstrip()
        first = said.splitlines()[0] if said else ""
        text = f"{first}\n{self.trace}" if self.trace and said else said
        super().__init__(reason, f"{who} raised {text}")


def failed_status(reason: Reason) -> ExitStatus:
    """A failed trial's exit status: a bug in the user's code (the dataset, the step) is
    ``DATASET_BUG``, as a sweep it stops; one in loadertune ``INTERNAL``; anything else
    ``NO_RESULT``."""
    if reason == Reason.INTERNAL_ERROR:
        return ExitStatus.INTERNAL
    return ExitStatus.DATASET_BUG if reason in USER_BUGS else ExitStatus.NO_RESULT


class StepError(TrialFailure):
    """The training step raised: the user's model or step, not the dataset or a setting.

    The message names the step and the innermost place of the original error (its traceback
    stays chained); :func:`classify` still reads an out-of-memory error as its own reason.
    """

    def __init__(self, step: str, err: BaseException) -> None:
        tb, where = err.__traceback__, ""
        while tb is not None:
            code = tb.tb_frame.f_code
            where = f" at {code.co_filename}:{tb.tb_lineno} in {code.co_name}"
            tb = tb.tb_next
        line = (str(err).strip().splitlines() or [""])[0]
        super().__init__(
            Reason.STEP_ERROR,
            f"the training step ({step}) raised {type(err).__name__}{where}: {line}. Fix the "
            "step: this is no loader setting",
        )


def step_failure(step: str, err: BaseException) -> TrialFailure:
    """The failure for a training step that raised ``err``: the step's (:class:`StepError`),
    unless loadertune's own code raised it (:func:`raised_inside_loadertune`): then
    ``internal_error``, its traceback chained, for a bug report."""
    text = "".join(traceback.format_exception(err))
    if not raised_inside_loadertune(text):
        return StepError(step, err)
    line = (str(err).strip().splitlines() or [""])[0]
    return TrialFailure(
        Reason.INTERNAL_ERROR,
        f"loadertune raised {error_signature(text)} while running the training step ({step}): "
        f"{line}. This is a bug in loadertune, not in the step: please report it with the "
        "traceback",
    )


class InfeasibleSetting(TrialFailure):
    """A setting predicted to break a resource guard; raised before any worker starts."""

    exit_status = ExitStatus.BAD_INPUT  # refused before anything runs, as bad input is
