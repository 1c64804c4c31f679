"""What the sweep does about other work on the machine, with a scripted probe and clock."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from hydra_plugins.loadertune_sweeper.plan._settings_checks import sweep_settings
from hydra_plugins.loadertune_sweeper.trial._busy_machine import BusyPolicy
from loadertune.errors import ConfigError
from loadertune.machine._interference import Interference


class Machine:
    """A probe that replays other work, one reading a look, and a clock the looks advance."""

    def __init__(self, loads: list[float]) -> None:
        self.loads = list(loads)
        self.now = 0.0
        self.looks = 0

    def probe(self, seconds: float) -> Interference:
        self.now += seconds
        self.looks += 1
        load = self.loads.pop(0) if len(self.loads) > 1 else self.loads[0]
        return Interference(load, 0.0, seconds)

    def clock(self) -> float:
        return self.now


def policy(
    mode: str, loads: list[float], wait_s: float = 5.0
) -> tuple[BusyPolicy, Machine, list[str]]:
    machine, notes = Machine(loads), []
    p = BusyPolicy(mode, wait_s, 50.0, notes.append, machine.probe, machine.clock)
    return p, machine, notes


def result(other: float, steal: float = 0.0) -> Any:
    return SimpleNamespace(other_cpu_percent=other, steal_percent=steal)


def test_warn_says_so_at_the_start_only_when_busy() -> None:
    quiet, _, notes = policy("warn", [10.0])
    quiet.at_start()
    assert notes == []
    busy, _, notes = policy("warn", [140.0])
    busy.at_start()
    assert len(notes) == 1 and "busy: other processes use 140% of a core" in notes[0]


def test_wait_waits_for_two_quiet_looks() -> None:
    p, machine, notes = policy("wait", [120.0, 30.0, 90.0, 20.0, 10.0])
    p.before_window()
    assert machine.looks == 5  # busy, quiet, busy again, then two quiet in a row
    assert any("waiting up to 5 s" in n for n in notes)


def test_wait_gives_up_after_busy_wait_s() -> None:
    p, machine, notes = policy("wait", [200.0], wait_s=3.0)
    p.before_window()
    assert machine.now == pytest.approx(3.0)
    assert "measuring anyway" in notes[-1]


def test_warn_and_ignore_never_wait() -> None:
    for mode in ("warn", "ignore"):
        p, machine, _ = policy(mode, [200.0])
        p.before_window()
        assert machine.looks == 0


@pytest.mark.parametrize(("mode", "again"), [("wait", True), ("warn", False), ("ignore", False)])
def test_a_disturbed_window_is_measured_again_only_when_waiting(mode: str, again: bool) -> None:
    p, _, _ = policy(mode, [0.0])
    assert p.measure_again(result(45.0, steal=10.0)) is again  # 55% > 50%
    assert p.measure_again(result(45.0)) is False


def test_the_end_names_the_windows_other_work_touched() -> None:
    p, _, notes = policy("warn", [0.0])
    p.seen("trial 0", result(10.0))
    p.seen("trial 1", result(80.0))
    p.at_end()
    assert len(notes) == 1
    assert "during 1 of 2 timed windows: trial 1 (80%)" in notes[0]
    silent, _, notes = policy("ignore", [0.0])
    silent.seen("trial 1", result(80.0))
    silent.at_end()
    assert notes == []


@pytest.mark.parametrize(
    ("key", "value", "phrase"),
    [
        ("busy", "sometimes", "hydra.sweeper.busy=sometimes: is not one of warn, wait, ignore"),
        ("busy_wait_s", 0, "hydra.sweeper.busy_wait_s=0.0: must be > 0"),
        ("busy_wait_s", None, "hydra.sweeper.busy_wait_s=null: cannot be null"),
        ("busy_cpu_percent", -5, "hydra.sweeper.busy_cpu_percent=-5.0: must be a number > 0"),
    ],
)
def test_bad_busy_settings_name_the_key(key: str, value: object, phrase: str) -> None:
    with pytest.raises(ConfigError) as caught:
        sweep_settings({"sampler": {}, "pruner": {}, key: value})
    assert phrase in str(caught.value)
