"""The Optuna study a sweep runs: where it is stored, what it is called, and sharing it.

By default the study is an SQLite file under ``outputs/`` and its name is derived from the
workload and the machine class, so running the same command again continues the same study,
and hosts of one class that share a storage (PostgreSQL, MySQL) meet in one study.

Several sweep processes (one per host) may run one study at once. Optuna numbers trials in a
transaction that locks the study row, so trial numbers order the hosts' requests; ``Slots``
uses that to keep a study-wide total exact, and fails the trials of sweeps that died (same
host: the process is gone; any host: no heartbeat for ``GRACE_S`` seconds) so another host
runs them again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import socket
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import optuna
import psutil
from optuna.trial import FrozenTrial, TrialState

from loadertune.record import Reason

from .. import _optuna_private
from .._keys import TrialAttr
from . import _hosts

INTERRUPTED = Reason.INTERRUPTED.value  # the sweep that ran the trial died: it measured nothing
OVER_BUDGET = "over_budget"  # asked for after another host took the study's last place
OUT_OF_RANGE = "out_of_range"  # queued before the command line changed the range it searches
LOST = (INTERRUPTED, OVER_BUDGET, OUT_OF_RANGE)  # FAIL reasons not counted toward a total

HEARTBEAT_S = 10  # a server-backed study's sweep records a heartbeat this often
GRACE_S = 60  # a RUNNING trial whose heartbeat is older than this is failed by any host
UNCLAIMED_S = 60.0  # a RUNNING trial with no owner after this long is failed too
POLL_S = 2.0  # how often a host waiting on other hosts' last trials looks again


def absolute_storage(url: str | None, output_root: str) -> str:
    """The storage URL with any SQLite path made absolute (Hydra may change directory per job)."""
    if url is None:
        path = Path(output_root).expanduser().resolve() / "optuna.db"
        path.parent.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{path}"
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/") and url != prefix + ":memory:":
        path = Path(url[len(prefix) :]).expanduser().resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        return f"{prefix}{path}"
    return url


def default_study_name(choices: dict[str, str], measured: dict[str, Any]) -> str:
    """``<dataset>-<storage>-<model>@<machine class>-<digest of everything else measured>``.

    The digest covers the fixed settings (dataset knobs, trial length, fixed loader keys), so
    a different workload never silently joins a study whose timings it cannot be compared to.
    The machine class (``8cpu-31g-nogpu-1a2b3c4d``, see ``_hosts``) replaces the host name:
    identical hosts sharing a storage join one study, different hardware gets its own.
    """
    digest = hashlib.sha256(json.dumps(measured, sort_keys=True, default=str).encode())
    workload = "-".join(choices[g] for g in ("dataset", "storage", "model"))
    return f"{workload}@{_hosts.fingerprint().machine_class}-{digest.hexdigest()[:8]}"


def open_study(
    storage: str,
    name: str,
    direction: Any,
    sampler: optuna.samplers.BaseSampler,
    pruner: optuna.pruners.BasePruner,
    heartbeat_s: int | None = HEARTBEAT_S,
    grace_s: int = GRACE_S,
) -> optuna.Study:
    """Create the study, or load it when it exists (resume, or join another host's).

    A database server (not SQLite) gets Optuna's heartbeats, so a host can tell when another
    host's sweep died mid-trial. Processes that start at the same moment on an empty database
    (hosts on a server, or two sweeps on one SQLite file) race to create Optuna's tables; the
    loser retries.
    """
    directions = list(direction) if isinstance(direction, list | tuple) else None
    backend = _storage(storage, heartbeat_s, grace_s)
    return optuna.create_study(
        storage=backend,
        study_name=name,
        sampler=sampler,
        pruner=pruner,
        direction=None if directions else direction,
        directions=directions,
        load_if_exists=True,
    )


def _storage(url: str, heartbeat_s: int | None, grace_s: int) -> optuna.storages.RDBStorage:
    server = not url.startswith("sqlite")
    kwargs: dict[str, Any] = {"engine_kwargs": {"pool_pre_ping": True} if server else {}}
    if server and heartbeat_s:
        kwargs.update(heartbeat_interval=heartbeat_s, grace_period=grace_s)
    for attempt in range(3):
        try:
            with warnings.catch_warnings():  # heartbeats are "experimental" since Optuna 2.9
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(url, **kwargs)
        except Exception:  # another process created the tables first (a host, a second
            # sweep on one SQLite file, a reader): UniqueViolation, "table already exists"
            if attempt == 2:
                raise
            time.sleep(0.2 + random.random())
    raise AssertionError("unreachable")


def space_conflict(study: optuna.Study, space: dict[str, Any]) -> str | None:
    """Why ``space`` cannot be searched in ``study``, or None: Optuna refuses, deep in the
    first suggestion, a parameter whose choices differ from those it was measured with."""
    for trial in study.get_trials(deepcopy=False):
        for name, measured in trial.distributions.items():
            wanted = space.get(name)
            if wanted is None:
                continue
            try:
                optuna.distributions.check_distribution_compatibility(measured, wanted)
            except ValueError:
                shown = getattr(measured, "choices", measured)
                return (
                    f"{name.lstrip('+')}: study '{study.study_name}' was measured with "
                    f"{shown}, this command searches {getattr(wanted, 'choices', wanted)}. Fix: "
                    "keep the study's choices, or name a new study with hydra.sweeper.study_name"
                )
    return None


def in_space(trial: FrozenTrial, space: dict[str, Any]) -> bool:
    """Whether every setting of ``trial`` that ``space`` searches lies in ``space``.

    A resumed study whose range the command line changed searches and recommends only in
    the range asked for: the command line wins, as it does over the guess's range
    (``plan._guess.restore_range``), and the trials measured inside it stay useful; a
    changed choice list, which Optuna cannot search at all, is refused (:func:`space_conflict`).
    """
    params = trial.params or _optuna_private.fixed_params(trial)
    return all(
        _optuna_private.contains(space[name], value)
        for name, value in params.items()
        if name in space
    )


def drop_out_of_range(study: optuna.Study, space: dict[str, Any]) -> list[str]:
    """FAIL (reason ``out_of_range``, not counted) the queued trials whose settings lie
    outside ``space``, so a resumed study never measures a stale setting; what was dropped."""
    dropped = []
    for frozen in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        fixed = _optuna_private.fixed_params(frozen)
        if in_space(frozen, space) or not _optuna_private.claim_waiting(study, frozen):
            continue
        trial = optuna.trial.Trial(study, _optuna_private.trial_id(frozen))
        trial.set_user_attr(TrialAttr.REASON, OUT_OF_RANGE)
        study.tell(frozen.number, state=TrialState.FAIL)
        shown = ", ".join(f"{k.lstrip('+')}={v}" for k, v in fixed.items() if k in space)
        dropped.append(f"trial {frozen.number} ({shown})")
    return dropped


def claim(trial: optuna.trial.Trial) -> None:
    """Mark the trial as owned by this process on this machine, so a later run can tell if
    its owner died, and every trial says which host and hardware measured it.

    The host is written last: another sweep on this host that sees it also sees the pid, and
    would otherwise take a half-claimed trial for an orphan.
    """
    me = psutil.Process()
    trial.set_user_attr(TrialAttr.OWNER_PID, me.pid)
    trial.set_user_attr(TrialAttr.OWNER_STARTED, me.create_time())
    for key, value in _hosts.trial_attrs(_hosts.fingerprint()).items():
        trial.set_user_attr(key, value)
    trial.set_user_attr(TrialAttr.OWNER_HOST, socket.gethostname())


def fail_orphaned_trials(study: optuna.Study, unclaimed_s: float = UNCLAIMED_S) -> list[int]:
    """Mark FAIL (reason ``interrupted``) the RUNNING trials whose sweep is gone.

    Optuna's heartbeats only run inside ``optimize()``; an ask/tell sweep that was killed
    leaves its trial RUNNING forever. A trial counts as orphaned when its owner on this host
    is no longer running, when its heartbeat (server storages) is older than the grace
    period whatever its host, or when nobody claimed it within ``unclaimed_s``. Trials of a
    live process, or of another host still beating, are left alone.
    """
    stale = set(_optuna_private.stale_trial_ids(study))
    now = datetime.now()
    failed = []
    for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if _optuna_private.trial_id(frozen) in stale or _orphaned_here(frozen, now, unclaimed_s):
            with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError, ValueError):
                # Another host may fail it first, or its owner may finish it meanwhile.
                trial = optuna.trial.Trial(study, _optuna_private.trial_id(frozen))
                trial.set_user_attr(TrialAttr.REASON, INTERRUPTED)
                study.tell(frozen.number, state=TrialState.FAIL)
                failed.append(frozen.number)
    return failed


def _orphaned_here(frozen: FrozenTrial, now: datetime, unclaimed_s: float) -> bool:
    attrs = frozen.user_attrs
    host = attrs.get(TrialAttr.OWNER_HOST)
    if host is None or attrs.get(TrialAttr.OWNER_PID) is None:  # not (fully) claimed yet
        started = frozen.datetime_start
        return started is not None and now - started >= timedelta(seconds=unclaimed_s)
    if host != socket.gethostname():
        return False
    return not _alive(attrs.get(TrialAttr.OWNER_PID), attrs.get(TrialAttr.OWNER_STARTED))


def _alive(pid: Any, started: Any) -> bool:
    if not isinstance(pid, int) or pid == os.getpid():
        return False
    try:
        proc = psutil.Process(pid)
        return started is None or abs(proc.create_time() - float(started)) < 1.0
    except psutil.Error:
        return False


def counts(trial: FrozenTrial) -> bool:
    """Whether a trial uses up a place of the study's total.

    Complete, pruned and failed trials do, and so does a running one (it will end); a trial
    lost with its sweep (``interrupted``) or given back (``over_budget``) does not: it
    measured nothing, and another trial takes its place. Nor does a repeat (``repeat_of``):
    it was answered from an earlier measurement, and ``n_trials`` counts settings measured.
    """
    if trial.user_attrs.get(TrialAttr.REPEAT_OF) is not None:
        return False
    if trial.state == TrialState.FAIL:
        return trial.user_attrs.get(TrialAttr.REASON) not in (*LOST, None)
    return trial.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)


def tally(study: optuna.Study) -> tuple[int, int]:
    """(finished trials that count, running trials) of the whole study."""
    trials = study.get_trials(deepcopy=False)
    running = sum(t.state == TrialState.RUNNING for t in trials)
    finished = sum(counts(t) and t.state != TrialState.RUNNING for t in trials)
    return finished, running


@dataclass(frozen=True)
class Budget:
    """How many trials this invocation runs, and the total that stops every host.

    ``count_trials=invocation`` (the official plugin's meaning): ``n_trials`` is what this
    invocation runs; ``max_trials_total``, if set, caps the whole study. ``count_trials=study``:
    ``n_trials`` is the study's total, so N hosts running the same command together run
    ``n_trials`` trials; each host keeps going until the study holds them all.
    """

    runs: int | None  # trials this invocation runs at most; None: until the total is reached
    total: int | None  # trials that count in the whole study; None: no cap
    shown: int  # the number to show as "running N now"

    @classmethod
    def of(
        cls, n_trials: int, max_trials_total: int | None, count_trials: str, study: optuna.Study
    ) -> Budget:
        finished, running = tally(study)
        taken = finished + running
        if count_trials == "study":
            total = n_trials if max_trials_total is None else min(n_trials, max_trials_total)
            return cls(None, total, max(0, total - taken))
        if max_trials_total is None:
            return cls(n_trials, None, n_trials)
        runs = min(n_trials, max(0, max_trials_total - taken))
        return cls(runs, max_trials_total, runs)

    def allows(self, ran: int) -> bool:
        """Whether this invocation may start another trial after ``ran``."""
        return self.runs is None or ran < self.runs


class Slots:
    """Hands this host the study's next trial, one at a time, within the study-wide total.

    Before each trial it fails trials whose sweep died (``on_lost`` records them) so they
    are run again. When every place of the total is taken by trials still running on other
    hosts, it waits for them (a host that dies frees its place) rather than leaving early.
    While this host's trial runs, a thread records Optuna heartbeats for it (server storages).
    """

    def __init__(
        self,
        study: optuna.Study,
        total: int | None,
        stopped: Callable[[], bool] = lambda: False,
        on_lost: Callable[[list[int]], None] | None = None,
        note: Callable[[str], None] | None = None,
        poll_s: float = POLL_S,
    ) -> None:
        self.study = study
        self.total = total
        self.stopped = stopped
        self.on_lost = on_lost
        self.note = note
        self.poll_s = poll_s
        self._current: int | None = None
        self._stop = threading.Event()
        self._beater: threading.Thread | None = None

    def next(self) -> optuna.trial.Trial | None:
        """This host's next trial, claimed; None once the study holds its total (or on stop)."""
        said = False
        while not self.stopped():
            lost = fail_orphaned_trials(self.study)
            if lost and self.on_lost is not None:
                self.on_lost(lost)
            if self.total is None:
                return self._take(self._ask())
            finished, running = tally(self.study)
            if finished >= self.total:
                return None
            if finished + running < self.total:
                trial = self._ask()
                if self._within_total(trial):
                    return self._take(trial)
                trial.set_user_attr(TrialAttr.REASON, OVER_BUDGET)
                self.study.tell(trial, state=TrialState.FAIL)
            elif not said and self.note is not None:
                said = True
                self.note(
                    f"all {self.total} places of the study are taken: waiting for "
                    f"{running} trial{'s' * (running != 1)} still running elsewhere (a host "
                    "that dies frees its place)"
                )
            time.sleep(self.poll_s)
        return None

    def close(self) -> None:
        """Stop the heartbeat thread."""
        self._stop.set()
        if self._beater is not None:
            self._beater.join(timeout=5)

    def _ask(self) -> optuna.trial.Trial:
        with warnings.catch_warnings():  # we beat ourselves; Optuna assumes optimize() does
            warnings.filterwarnings("ignore", "Heartbeat of storage is supposed to be used")
            return self.study.ask()

    def _within_total(self, trial: optuna.trial.Trial) -> bool:
        """Whether fewer than ``total`` counting trials were numbered before this one."""
        assert self.total is not None
        earlier = self.study.get_trials(deepcopy=False)
        return sum(t.number < trial.number and counts(t) for t in earlier) < self.total

    def _take(self, trial: optuna.trial.Trial) -> optuna.trial.Trial:
        claim(trial)
        storage = _optuna_private.storage(self.study)
        interval = getattr(storage, "get_heartbeat_interval", lambda: None)()
        if interval:
            self._current = _optuna_private.trial_id(trial)
            storage.record_heartbeat(self._current)
            if self._beater is None:
                self._beater = threading.Thread(
                    target=self._beat, args=(storage, interval), name="loadertune-heartbeat"
                )
                self._beater.daemon = True
                self._beater.start()
        return trial

    def _beat(self, storage: Any, interval: float) -> None:
        while not self._stop.wait(interval):
            if self._current is not None:
                with contextlib.suppress(Exception):  # a missed beat is not worth a crash
                    storage.record_heartbeat(self._current)
