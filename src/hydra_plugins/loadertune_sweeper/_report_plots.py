"""The verdict's figure: what each number of workers costs and gives, baselines marked.

Four panels over ``num_workers``, one point per measured trial: time per sample (the
verdict's re-measurements as medians with their range, baselines labelled, the model-based
prediction as a cross), the share of time spent waiting for data, peak memory, and CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from loadertune.search_rules import plain_key


def _workers(t: optuna.trial.FrozenTrial) -> int:
    return int(next((v for k, v in t.params.items() if plain_key(k) == "loader.num_workers"), 0))


def verdict_figure(
    study: optuna.Study, cands: list[Any], guess: dict[str, Any] | None, out: Path
) -> Path:
    """Draw the four panels into ``out`` (PNG) and return it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trials = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.user_attrs.get("repeat_of") is None and t.value is not None
    ]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    (ax_t, ax_w), (ax_m, ax_c) = axes
    x = [_workers(t) for t in trials]
    ax_t.scatter(x, [t.value for t in trials], s=18, color="0.6", label="trials")
    for c in cands:
        if not c.values:
            continue
        low, high = min(c.values), max(c.values)
        ax_t.errorbar(
            [c.workers], [c.median], yerr=[[c.median - low], [high - c.median]], fmt="o", capsize=4
        )
        ax_t.annotate(
            c.name, (c.workers, c.median), fontsize=7, xytext=(4, 4), textcoords="offset points"
        )
    if guess:
        ax_t.scatter(
            [guess["workers"]],
            [guess["time_per_sample_ms"]],
            marker="x",
            s=70,
            color="black",
            label="model-based prediction",
        )
    ax_t.set(
        xlabel="num_workers",
        ylabel="time per sample (ms), lower is better",
        title="time per sample (verdict: median and range of repeats)",
    )
    ax_t.legend(fontsize=8)
    panels = (
        (ax_w, "data_wait_fraction", "share of time waiting for data"),
        (ax_m, "peak_memory_mb", "peak memory, PSS of main + workers (MB)"),
        (ax_c, "cpu_percent_mean", "CPU, % of one core"),
    )
    for ax, attr, title in panels:
        points = [
            (w, t.user_attrs[attr]) for w, t in zip(x, trials, strict=True) if attr in t.user_attrs
        ]
        ax.scatter([p[0] for p in points], [p[1] for p in points], s=18)
        ax.set(xlabel="num_workers", title=title)
    from matplotlib.ticker import MaxNLocator

    for ax in axes.flat:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(f"study {study.study_name}")
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
