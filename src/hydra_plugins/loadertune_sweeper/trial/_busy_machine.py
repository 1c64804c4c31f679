"""Other work on the machine: say when it is busy, or wait for it to quiet down.

Timings taken while other processes hold the CPUs are slower than the machine gives when
quiet, and not alike across settings. ``hydra.sweeper.busy`` chooses what the sweep does
about it: ``warn`` says so at the start and at the end, ``wait`` also waits for quiet before
each timed window and measures once more a window that other work still touched, ``ignore``
says nothing. A load that outlasts a whole wait is steady: from then on ``wait`` looks once
before a window and neither waits nor measures again while the load stays (waiting would
only idle the machine before every window), and waits again once a look finds it quiet.
The probe is :func:`loadertune.machine._interference.measure_interference` over the sweep process's
own tree, so only work that is not the sweep's counts.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loadertune.machine import measure_interference

if TYPE_CHECKING:
    from loadertune.machine import Interference
    from loadertune.record import TrialResult

PROBE_S = 0.5  # one look at the machine
QUIET_PROBES = 2  # looks in a row under the threshold that count as quiet


def _probe(seconds: float) -> Interference:
    return measure_interference(seconds, os.getpid())


@dataclass
class BusyPolicy:
    """What the sweep does about other work (``hydra.sweeper.busy``)."""

    mode: str  # warn | wait | ignore
    wait_s: float
    cpu_percent: float  # % of one core above which the machine counts as busy
    note: Callable[[str], None]
    probe: Callable[[float], Interference] = _probe
    clock: Callable[[], float] = time.monotonic
    touched: list[str] = field(default_factory=list)  # windows other work disturbed
    windows: int = 0
    steady: bool = False  # a whole wait passed without quiet: the load is constant

    def load(self, seen: Interference) -> float:
        """Other work and steal, in % of one core."""
        return seen.other_cpu_percent + seen.steal_percent

    def at_start(self) -> None:
        """Warn when the machine is busy before the first trial."""
        if self.mode == "ignore":
            return
        seen = self.load(self.probe(PROBE_S))
        if seen > self.cpu_percent:
            self.note(
                f"warning: this machine is busy: other processes use {seen:.0f}% of a core "
                f"(above hydra.sweeper.busy_cpu_percent={self.cpu_percent:g}). Timings will be "
                "slower and noisier than on a quiet machine; the verdict's confidence will say "
                "how much it matters. hydra.sweeper.busy=wait waits for quiet before each trial"
            )

    def before_window(self, stopped: Callable[[], bool] = lambda: False) -> None:
        """With ``wait``: wait until other work stays under the threshold (bounded)."""
        if self.mode != "wait":
            return
        if self.steady:
            if self.load(self.probe(PROBE_S)) > self.cpu_percent:
                return  # the same load: waiting again would only idle the machine
            self.steady = False  # it quieted: wait for quiet again before each window
        deadline = self.clock() + self.wait_s
        quiet, said = 0, False
        while quiet < QUIET_PROBES and not stopped():
            seen = self.load(self.probe(PROBE_S))
            if seen <= self.cpu_percent:
                quiet += 1
                continue
            quiet = 0
            if self.clock() >= deadline:
                self.steady = True
                self.note(
                    f"busy: still {seen:.0f}% of a core after {self.wait_s:g} s; measuring "
                    "anyway (hydra.sweeper.busy_wait_s sets the wait), and while this load "
                    "stays, without waiting or measuring again"
                )
                return
            if not said:
                said = True
                self.note(
                    f"busy: other processes use {seen:.0f}% of a core; waiting up to "
                    f"{self.wait_s:g} s for quiet"
                )

    def disturbed(self, result: TrialResult | None) -> bool:
        """Whether other work took more than the threshold during this result's window."""
        if result is None:
            return False
        return result.other_cpu_percent + result.steal_percent > self.cpu_percent

    def measure_again(self, result: TrialResult | None) -> bool:
        """With ``wait``: whether to measure this window once more (not under a steady load:
        the window again would be touched alike)."""
        return self.mode == "wait" and not self.steady and self.disturbed(result)

    def seen(self, what: str, result: TrialResult | None) -> None:
        """Count a timed window, and remember it if other work disturbed it."""
        if result is None:
            return
        self.windows += 1
        if self.disturbed(result):
            load = result.other_cpu_percent + result.steal_percent
            self.touched.append(f"{what} ({load:.0f}%)")

    def at_end(self) -> None:
        """Say which windows other work touched."""
        if self.mode == "ignore" or not self.touched:
            return
        shown = ", ".join(self.touched[:8]) + (" ..." if len(self.touched) > 8 else "")
        self.note(
            f"warning: other processes used more than {self.cpu_percent:g}% of a core during "
            f"{len(self.touched)} of {self.windows} timed windows: {shown}. Those figures are "
            "slower than a quiet machine gives; see the verdict's confidence"
        )
