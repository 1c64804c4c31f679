"""Stop a running trial from a guard's thread: end its workers, fail its main thread.

The guards (:mod:`loadertune.guards._memory_watch`, :mod:`loadertune.guards._worker_output`) run
beside the training loop, which may be blocked waiting for a batch that will never come. So a stop
kills the trial's child processes, then sends SIGINT to the main thread alone (which interrupts a
blocking wait, where ``_thread.interrupt_main`` would only set a flag), whose handler raises.
Whatever then unwinds the trial is turned into :class:`TrialFailure` with the guard's reason.
If the main thread does not answer within ``grace_s`` (stuck in one long C call) the process
prints one line and ends with :data:`EXIT_TRIAL_FAILED` (for the memory budget only: a
lost batch can wait for the loop to notice its killed workers).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType, TracebackType
from typing import Any

import psutil

from loadertune import _torch_private
from loadertune.config import TrialConfig
from loadertune.errors import ExitStatus
from loadertune.guards._memory_watch import TrialMemoryWatch
from loadertune.guards._worker_output import WorkerOutputWatch
from loadertune.machine import memory_budget_bytes
from loadertune.record import Reason, TrialFailure
from loadertune.record import _channel as channel

EXIT_TRIAL_FAILED = int(ExitStatus.NO_RESULT)  # 3: the single trial failed
UNHANDLED_S = 10.0  # a trial off the main thread notices its killed workers within 5 s


class _Stopped(BaseException):
    """Raised in the main thread; a BaseException so ``except Exception`` cannot swallow it."""


class TrialStopper:
    """Context around a trial: :meth:`stop` (any thread) ends it with a :class:`TrialFailure`.

    On exit the first failure asked for wins over whatever exception unwound the trial (a
    DataLoader noticing its killed workers, say), and over a normal end: a trial a guard
    stopped is never reported as measured.
    """

    def __init__(self, grace_s: float = 2.0) -> None:
        self.grace_s = grace_s
        self.failure: TrialFailure | None = None
        self._lock = threading.Lock()
        self._answered = threading.Event()
        self._thread = threading.get_ident()
        self._previous: Any = None
        self._handling = False

    def __enter__(self) -> TrialStopper:
        self._thread = threading.get_ident()
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
            self._handling = True
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._answered.set()
        if self._handling:
            previous = self._previous if self._previous is not None else signal.SIG_DFL
            signal.signal(signal.SIGINT, previous)
            self._handling = False
        if self.failure is not None:
            raise self.failure from (None if isinstance(exc, _Stopped) else exc)

    def fail(self, reason: Reason, message: str) -> bool:
        """Record the failure the trial will end with; False if one was recorded already."""
        with self._lock:
            if self.failure is not None:
                return False
            self.failure = TrialFailure(reason, message)
            return True

    def stop(self, reason: Reason, message: str, hard: bool = False) -> None:
        """Fail the trial with ``reason`` now: kill its children, interrupt its main thread.

        ``hard``: if the trial has not answered within ``grace_s`` (its thread interrupted) or
        ``UNHANDLED_S`` (a thread that cannot be), end the process (memory must not grow on).
        """
        if not self.fail(reason, message):
            return
        kill_children()
        if self._handling:
            with contextlib.suppress(ProcessLookupError, OSError):
                signal.pthread_kill(self._thread, signal.SIGINT)
        if not hard:
            return
        if not self._answered.wait(self.grace_s if self._handling else UNHANDLED_S):
            print(f"loadertune: error: {self.failure}", file=sys.stderr, flush=True)
            os._exit(EXIT_TRIAL_FAILED)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self.failure is None:  # a real Ctrl-C: as before
            if self._previous == signal.SIG_IGN:  # a sweep's trial: Ctrl-C is the sweep's
                return
            if callable(self._previous):
                self._previous(signum, frame)
                return
            raise KeyboardInterrupt
        self._answered.set()
        raise _Stopped(str(self.failure))


def kill_children() -> None:
    """SIGKILL every descendant of this process (the DataLoader workers, the sampler)."""
    _forget_workers()
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.kill()


@contextlib.contextmanager
def trial_guards(tc: TrialConfig) -> Iterator[TrialStopper]:
    """The guards around one trial: its workers' printed errors, always; its memory budget
    (``trial.memory_budget_mb``) only outside a sweep, whose process guards the trial's tree.
    """

    with TrialStopper() as stopper:
        with WorkerOutputWatch(lambda f: stopper.stop(f.reason, f.message())) as printed:
            if channel.current() is None:
                budget = memory_budget_bytes(tc.memory_budget_mb)
                with TrialMemoryWatch(
                    budget, lambda m: stopper.stop(Reason.MEMORY_BUDGET, m, hard=True)
                ):
                    yield stopper
            else:
                yield stopper
        if printed.fault is not None:  # printed as the trial ended: still not measured
            stopper.fail(printed.fault.reason, printed.fault.message())


def _forget_workers() -> None:
    """Tell PyTorch the workers about to be killed are meant to die.

    Otherwise its SIGCHLD handler raises "DataLoader worker ... is killed by signal" in the
    main thread whenever the death is noticed, even at exit after the failure was reported.
    """
    if "torch" not in sys.modules:
        return
    _torch_private.unwatch_all_workers()
