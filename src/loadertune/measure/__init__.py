"""Measurement: the timed window, when it has measured enough, and what its figures say.

Rooms (the names other packages use are re-exported below, each room imported on the first
use of one of its names, so importing the package imports none of them):

- ``_accelerator``: the CUDA path: host-to-device copies timed on the device, GPU memory and
  utilisation.
- ``_diagnosis``: what limits a trial's pipeline, labelled from what the trial measured, with the
  evidence.
- ``_paired_stats``: comparing settings timed in interleaved rounds: the statistics behind every
  verdict.
- ``_precision``: when a timed window has measured enough: the rate's confidence interval, from
  batch means.
- ``_steady_state``: what keeps a trial's timed window in the steady state: the look-ahead consumed
  before timing starts, and one long stream of indices so no epoch ends inside the window.
- ``_timing``: per-step timing and the summary that becomes a trial's objective.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadertune._lazy import lazy_package

__all__ = [
    "MARGIN",
    "MAX_STEPS_FACTOR",
    "MIN_STEPS",
    "RATIO_LOW",
    "RATIO_MEDIUM",
    "SPREAD_LOW",
    "SPREAD_MEDIUM",
    "TOLERANCE",
    "GpuMonitor",
    "HostCopyTimer",
    "Rounds",
    "StepCallback",
    "StepRecord",
    "StepTimer",
    "StopRule",
    "TimingSummary",
    "copy_figures",
    "copy_timer",
    "diagnose",
    "diagnose_result",
    "may_be_faster",
    "median_interval",
    "pace_setter",
    "paired",
    "pooled_log_sd",
    "rate_ci",
    "ratio_spread",
    "round_free_times",
    "round_gain",
    "rounds_to_settle",
    "shown_as_fast",
    "shown_slower",
    "spread",
    "steps_for_tail",
    "stream_sampler",
    "summarize",
    "too_short",
    "warmup_steps",
]

if TYPE_CHECKING:
    from loadertune.measure._accelerator import GpuMonitor, HostCopyTimer, copy_figures, copy_timer
    from loadertune.measure._diagnosis import diagnose, diagnose_result
    from loadertune.measure._paired_stats import (
        MARGIN,
        RATIO_LOW,
        RATIO_MEDIUM,
        SPREAD_LOW,
        SPREAD_MEDIUM,
        TOLERANCE,
        Rounds,
        may_be_faster,
        median_interval,
        paired,
        pooled_log_sd,
        ratio_spread,
        round_free_times,
        round_gain,
        rounds_to_settle,
        shown_as_fast,
        shown_slower,
        spread,
    )
    from loadertune.measure._precision import (
        MAX_STEPS_FACTOR,
        MIN_STEPS,
        StopRule,
        rate_ci,
        steps_for_tail,
        too_short,
    )
    from loadertune.measure._steady_state import stream_sampler, warmup_steps
    from loadertune.measure._timing import (
        StepCallback,
        StepRecord,
        StepTimer,
        TimingSummary,
        pace_setter,
        summarize,
    )

__getattr__ = lazy_package(__name__, __file__)
