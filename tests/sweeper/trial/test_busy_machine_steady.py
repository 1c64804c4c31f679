"""``busy=wait`` under a constant load: one whole wait, then no more waiting or measuring
again while the load stays, beside a real CPU hog (outside this process's tree)."""

from __future__ import annotations

from hydra_plugins.loadertune_sweeper.trial._busy_machine import BusyPolicy, _probe
from loadertune.machine._interference import Interference
from tests._processes import cpu_hogs


def test_a_steady_load_is_waited_for_once_then_measured_without_waiting() -> None:
    looks: list[float] = []

    def probe(seconds: float) -> Interference:
        seen = _probe(seconds)  # the real machine
        looks.append(seen.other_cpu_percent + seen.steal_percent)
        return seen

    notes: list[str] = []
    # The threshold lies well below what two spinning neighbours take (~200% of a core).
    policy = BusyPolicy("wait", 1.0, 50.0, notes.append, probe)
    with cpu_hogs(2):
        policy.before_window()  # waits its whole busy_wait_s, then measures anyway
        waited = len(looks)
        assert policy.steady and "without waiting or measuring again" in notes[-1]
        for _ in range(3):  # the next windows: one look each, no wait
            policy.before_window()
        assert len(looks) == waited + 3
        busy = type("R", (), {"other_cpu_percent": looks[-1], "steal_percent": 0.0})()
        assert not policy.measure_again(busy)
    quiet = BusyPolicy("wait", 1.0, 10_000.0, notes.append, probe)  # nothing counts as busy
    quiet.steady = True
    quiet.before_window()
    assert not quiet.steady  # a quiet look: waiting for quiet again from now on
