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

from loadertune import _lazy

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
        too_short,
    )
    from loadertune.measure._steady_state import stream_sampler, warmup_steps
    from loadertune.measure._timing import (
        StepCallback,
        StepRecord,
        StepTimer,
        TimingSummary,
        summarize,
    )

_WHERE = {
    "copy_figures": "_accelerator",
    "copy_timer": "_accelerator",
    "diagnose": "_diagnosis",
    "diagnose_result": "_diagnosis",
    "GpuMonitor": "_accelerator",
    "HostCopyTimer": "_accelerator",
    "MARGIN": "_paired_stats",
    "MAX_STEPS_FACTOR": "_precision",
    "may_be_faster": "_paired_stats",
    "median_interval": "_paired_stats",
    "MIN_STEPS": "_precision",
    "paired": "_paired_stats",
    "pooled_log_sd": "_paired_stats",
    "rate_ci": "_precision",
    "RATIO_LOW": "_paired_stats",
    "RATIO_MEDIUM": "_paired_stats",
    "ratio_spread": "_paired_stats",
    "round_free_times": "_paired_stats",
    "round_gain": "_paired_stats",
    "Rounds": "_paired_stats",
    "rounds_to_settle": "_paired_stats",
    "shown_as_fast": "_paired_stats",
    "shown_slower": "_paired_stats",
    "spread": "_paired_stats",
    "SPREAD_LOW": "_paired_stats",
    "SPREAD_MEDIUM": "_paired_stats",
    "StepCallback": "_timing",
    "StepRecord": "_timing",
    "StepTimer": "_timing",
    "StopRule": "_precision",
    "stream_sampler": "_steady_state",
    "summarize": "_timing",
    "TimingSummary": "_timing",
    "TOLERANCE": "_paired_stats",
    "too_short": "_precision",
    "warmup_steps": "_steady_state",
}

__getattr__ = _lazy(__name__, _WHERE)
