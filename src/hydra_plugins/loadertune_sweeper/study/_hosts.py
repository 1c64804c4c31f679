"""Which machine a sweep runs on, and whether it may join a study.

Loader timings only compare between identical machines: a study shared by several hosts is
meant for one *machine class* (say, the cluster's 8-GPU nodes). The first host to join a study
stamps it with its fingerprint (CPU model and count, memory, GPUs, torch); a host whose
fingerprint differs is refused with one line, unless the user forces it. Every trial records
the host and the fingerprint it ran on, and the default study name includes the machine class,
so hosts of one class meet in one study without being told its name.

Nothing here initialises CUDA: the sweep process forks its trials, and a CUDA context created
before ``fork`` breaks every child. GPU names come from ``nvidia-smi``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
from dataclasses import asdict, dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import psutil

from loadertune._lazy import torch
from loadertune.errors import ConfigError
from loadertune.machine import cpu_model, usable_cpus

from .._keys import StudyAttr, Tag, TrialAttr

if TYPE_CHECKING:
    import optuna

FORCE_KEY = "hydra.sweeper.force_fingerprint"


@dataclass(frozen=True)
class Fingerprint:
    """What makes two hosts' timings comparable.

    Memory is rounded to whole GiB: identical nodes report a few MB apart. CPUs are both the
    host's (``cpus``) and those this process may use (``usable_cpus``: affinity, cgroup
    CPU quota, SLURM), since a SLURM allocation of half a node loads data at half the speed.
    """

    cpu_model: str
    cpus: int
    usable_cpus: int
    memory_gib: int
    gpu: str  # "none", or "<count> x <name>"
    torch: str

    def as_dict(self) -> dict[str, Any]:
        """The fingerprint as plain JSON, as stored in Optuna's user attrs."""
        return asdict(self)

    @property
    def digest(self) -> str:
        """Eight hex digits that change when any field does."""
        text = json.dumps(self.as_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:8]

    @property
    def machine_class(self) -> str:
        """A short, readable class name: ``8cpu-31g-nogpu-1a2b3c4d``."""
        gpu = "nogpu" if self.gpu == "none" else _slug(self.gpu)
        return f"{self.usable_cpus}cpu-{self.memory_gib}g-{gpu}-{self.digest}"


@cache
def fingerprint() -> Fingerprint:
    """This host's fingerprint (computed once per process; imports torch)."""
    return Fingerprint(
        cpu_model=cpu_model(),
        cpus=os.cpu_count() or 1,
        usable_cpus=usable_cpus(),
        memory_gib=round(psutil.virtual_memory().total / 2**30),
        gpu=gpu_inventory(),
        torch=str(torch.__version__),
    )


def gpu_inventory() -> str:
    """``"<count> x <model>"`` of the NVIDIA GPUs on this host, or ``"none"``.

    Asks ``nvidia-smi`` rather than torch: ``torch.cuda.get_device_name`` creates a CUDA
    context in the sweep process, and forked trials could no longer use CUDA.
    """
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "none"
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "none"
    names = [line.strip() for line in out.splitlines() if line.strip()]
    if not names:
        return "none"
    kinds = sorted(set(names))
    return " + ".join(f"{names.count(k)} x {k}" for k in kinds)


def admit(study: optuna.Study, mine: Fingerprint, force: bool = False) -> str | None:
    """Let this host into the study, or refuse it with one line naming the fix.

    A study without a fingerprint takes this host's. Returns a note to show when a
    different host was let in because ``force`` was set, else None.

    Raises:
        ConfigError: the study was measured on another machine class and ``force`` is off.
    """
    stored = study.user_attrs.get(StudyAttr.FINGERPRINT)
    if stored is None:
        study.set_user_attr(StudyAttr.FINGERPRINT, mine.as_dict())
        stored = study.user_attrs.get(StudyAttr.FINGERPRINT, mine.as_dict())
    diffs = differences(stored, mine.as_dict())
    if not diffs:
        return None
    theirs = _class_of(stored)
    what = "; ".join(diffs)
    if force:
        return (
            f"{FORCE_KEY}=true: {socket.gethostname()} ({mine.machine_class}) joins a study "
            f"measured on {theirs} although {what}"
        )
    raise ConfigError(
        FORCE_KEY,
        False,
        f"study {study.study_name} was measured on {theirs} and this host "
        f"({socket.gethostname()}, {mine.machine_class}) differs: {what}; timings taken on "
        "different hardware do not compare",
        "run it on a host of that class, choose another study (hydra.sweeper.study_name=... "
        f"or null for this class's own), or set {FORCE_KEY}=true to join anyway",
    )


def differences(stored: Any, mine: dict[str, Any]) -> list[str]:
    """``"<field> <theirs> here <mine>"`` for every field that differs."""
    if not isinstance(stored, dict):
        return [f"the study's fingerprint is unreadable ({stored!r})"]
    return [
        f"{key} {stored.get(key)!r} here {value!r}"
        for key, value in mine.items()
        if stored.get(key) != value
    ]


def trial_attrs(mine: Fingerprint) -> dict[str, Any]:
    """User attrs recorded on every trial beside its owner host and pid (one write: each
    attribute is a database round trip, a few ms on a server)."""
    return {TrialAttr.MACHINE: {"class": mine.machine_class, **mine.as_dict()}}


def run_tags(user_attrs: dict[str, Any]) -> dict[str, str]:
    """MLflow tags for a trial's child run, from the trial's user attrs.

    Measured trials already carry ``machine.host``, ``machine.cpu_model`` and friends from
    the trial itself; these add the class and the sweep host for every child run, refused
    and repeated ones included, so runs can be grouped by class in the MLflow UI.
    """
    tags: dict[str, str] = {}
    machine = user_attrs.get(TrialAttr.MACHINE)
    if isinstance(machine, dict) and machine.get("class"):
        tags[Tag.MACHINE_CLASS] = str(machine["class"])
    if user_attrs.get(TrialAttr.OWNER_HOST):
        tags[Tag.SWEEP_HOST] = str(user_attrs[TrialAttr.OWNER_HOST])
    return tags


def host_tags() -> dict[str, str]:
    """MLflow tags for a sweep's parent run: which host and process (so a later start can
    tell a dead sweep's run from a live one), which class."""
    return {
        Tag.HOST: socket.gethostname(),
        Tag.MACHINE_CLASS: fingerprint().machine_class,
        Tag.PID: str(os.getpid()),
    }


def _class_of(stored: Any) -> str:
    try:
        return Fingerprint(**stored).machine_class
    except TypeError:
        return "an unknown machine class"


def _slug(text: str) -> str:
    """``"8 x NVIDIA H200"`` -> ``"8xh200"``."""
    text = text.lower().replace(" x ", "x").replace("nvidia ", "")
    return re.sub(r"[^a-z0-9x+]+", "-", text).strip("-")
