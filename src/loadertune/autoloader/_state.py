"""Checkpoint state: the tuner's progress as plain data, with the segment in progress put back.

A checkpoint taken mid-segment cannot keep that segment's partial figures (the loader that
measured them is gone after a restart), so the segment goes back to the front of the queue
and is measured again; one taken during the first (guess) segment restarts the guess.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from loadertune.autoloader._schedule import Segment, Tuner


def tuner_state(tuner: Tuner, current: Segment | None) -> dict[str, Any]:
    """The tuner's state, as if the segment in progress had not started."""
    state = tuner.state()
    if current is not None:
        if current.round < 0 and tuner.guess is None and tuner.forced is None and not tuner.cands:
            state["started"] = False  # the guess segment: measure it again
        else:
            state["queue"].insert(0, {**asdict(current), "setting": asdict(current.setting)})
    return state


def check_version(state: dict[str, Any], version: int) -> None:
    """Refuse a state written by another layout, naming what to do."""
    found = state.get("version")
    if found != version:
        raise ValueError(
            f"AutoLoader.load_state_dict: state version {found!r}, this AutoLoader writes "
            f"{version}; resume with the loadertune version that wrote the checkpoint"
        )
