"""One segment as every rank measured it: the figures rank 0 decides from.

The node moves at its slowest rank's pace (DistributedDataParallel's gradient all-reduce
holds every rank to it), so a segment is booked with that rank's time per batch, and with
each figure as the node saw it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from loadertune.autoloader._schedule import Measure
from loadertune.measure import pace_setter


def slowest(measures: list[Measure]) -> Measure:
    """One segment as every rank measured it: the slowest rank's pace (it sets the node's:
    :func:`~loadertune.measure.pace_setter`); the longest wait for data (the slowest
    loader's); the shortest step (the others' steps include waiting in a collective for that
    loader); the CPU time and memory of every rank's process tree (the node's)."""
    if len(measures) == 1:
        return measures[0]
    if len({(m.setting, m.steps) for m in measures}) > 1:
        ranks = ", ".join(
            f"rank {r}: {m.setting} for {m.steps} steps" for r, m in enumerate(measures)
        )
        raise RuntimeError(
            f"AutoLoader: the ranks probed different segments ({ranks}); build every rank's "
            "AutoLoader with the same arguments and iterate them in step"
        )
    pace = pace_setter(measures, lambda m: m.per_batch_s)
    waits = max(measures, key=lambda m: m.wait_s)
    steps = min(measures, key=lambda m: m.step_s)
    return replace(
        pace,
        wait_s=waits.wait_s,
        counted_wait_s=waits.counted_wait_s,
        wait_cpu_s=waits.wait_cpu_s,
        step_s=steps.step_s,
        step_cpu_s=steps.step_cpu_s,
        tree_cpu_s=sum(m.tree_cpu_s for m in measures),
        peak_rss_mb=sum(m.peak_rss_mb for m in measures),
        queued_s=_total(m.queued_s for m in measures),
    )


def _total(values: Iterable[float | None]) -> float | None:
    """The sum of the figures the ranks have; None when none has one."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None
