"""The verdict's figure: what each number of workers costs and gives, baselines marked.

Four panels over ``num_workers``, one point per measured trial: time per sample (the
verdict's re-measurements as medians with their range, one colour per candidate, the
model-based prediction as a cross), the share of time spent waiting for data, peak memory,
and CPU. The recommended setting is ringed, with a dashed line at its workers through all
four panels. Names go in one legend below the panels, never on the data.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from loadertune._lazy import matplotlib, plt
from loadertune.config import workers_of

from .._keys import TrialAttr, TrialFigures
from ._candidates import recommend

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from loadertune.decision import Guess

    from ._candidates import Candidate

PANELS = (
    ("data_wait_fraction", "share of time waiting for data", "share of step time"),
    ("peak_memory_mb", "peak memory, PSS of main + workers", "MB"),
    ("cpu_percent_mean", "CPU", "% of one core"),
)
# Sizes in points: nothing under 10, so the figure reads at a glance at its saved size.
FONTS: dict[Any, Any] = {
    "font.size": 11,
    "axes.titlesize": 12,
    "axes.labelsize": 11,
    "legend.fontsize": 10,
}
RECOMMENDED_COLOR = "black"
RECOMMENDED: dict[str, Any] = {"color": RECOMMENDED_COLOR, "linestyle": "--", "linewidth": 1.5}


def verdict_figure(
    study: optuna.Study,
    cands: list[Candidate],
    guess: Guess | None,
    out: Path,
    recommended: Candidate | None = None,
) -> Path:
    """Draw the four panels into ``out`` (PNG) and return it.

    ``recommended`` is the verdict's chosen candidate; when not given it is worked out from
    ``cands`` as the verdict does.
    """
    matplotlib.use("Agg")

    with plt.rc_context(FONTS):
        fig = draw_verdict(study, cands, guess, recommended)
        fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def draw_verdict(
    study: optuna.Study,
    cands: list[Candidate],
    guess: Guess | None,
    recommended: Candidate | None = None,
) -> Figure:
    """The verdict's figure, not yet saved (see :func:`verdict_figure`)."""
    trials = _measured(study)
    chosen = recommended if recommended is not None else _recommended(cands)
    fig, axes = plt.subplots(2, 2, figsize=(12, 9), layout="constrained")
    _time_panel(axes[0][0], trials, cands, guess)
    for ax, (attr, title, unit) in zip(axes.flat[1:], PANELS, strict=True):
        _attr_panel(ax, trials, attr, title, unit)
    for ax in axes.flat:
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if chosen is not None:
            ax.axvline(chosen.workers, **RECOMMENDED)
    if chosen is not None:
        _mark_recommended(axes[0][0], chosen)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=2)
    fig.suptitle(f"study {study.study_name}", fontsize=12)
    return fig


def _measured(study: optuna.Study) -> list[FrozenTrial]:
    """Completed trials that measured something themselves (repeats left out)."""
    return [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.user_attrs.get(TrialAttr.REPEAT_OF) is None and t.value is not None
    ]


def _workers(trial: FrozenTrial) -> int:
    return workers_of(trial.params, 0) or 0


def _recommended(cands: list[Candidate]) -> Candidate | None:
    """The candidate the verdict recommends, or None when none was measured again."""
    measured = [c for c in cands if c.values]
    return recommend(measured).chosen if measured else None


def _time_panel(
    ax: Axes, trials: list[FrozenTrial], cands: list[Candidate], guess: Guess | None
) -> None:
    """Time per sample: every trial, the verdict's repeats, the model-based prediction."""
    ax.scatter(
        [_workers(t) for t in trials],
        [t.value or 0.0 for t in trials],
        s=20,
        color="0.65",
        label="trial",
    )
    for c in cands:
        if not c.values:
            continue
        low, high = min(c.values), max(c.values)
        ax.errorbar(
            [c.workers],
            [c.median],
            yerr=[[c.median - low], [high - c.median]],
            fmt="o",
            markersize=7,
            capsize=5,
            label=c.name,
        )
    if guess:
        ax.scatter(
            [guess.workers],
            [guess.time_per_sample_ms],
            marker="x",
            s=90,
            linewidths=2,
            color="tab:gray",
            label="model-based prediction",
        )
    ax.set(
        xlabel="num_workers",
        ylabel="ms per sample (lower is better)",
        title="time per sample (verdict: median and range of repeats)",
    )


def _mark_recommended(ax: Axes, chosen: Candidate) -> None:
    """Ring the recommended setting's median and name it at the top of its line, inside the
    panel (on the side of the line with room); its line runs through every panel."""
    low, high = ax.get_xlim()
    right_half = chosen.workers > (low + high) / 2
    ax.text(
        chosen.workers,
        0.97,
        " recommended ",
        transform=matplotlib.transforms.blended_transform_factory(ax.transData, ax.transAxes),
        ha="right" if right_half else "left",
        va="top",
        fontweight="bold",
        clip_on=True,
    )
    ax.scatter(
        [chosen.workers],
        [chosen.median],
        s=400,
        facecolors="none",
        edgecolors=RECOMMENDED_COLOR,
        linewidths=2,
        label=f"recommended: num_workers={chosen.workers}",
    )


def _attr_panel(ax: Axes, trials: list[FrozenTrial], attr: str, title: str, unit: str) -> None:
    """One recorded figure of each trial against its workers."""
    kept = [(t, TrialFigures.of(t.user_attrs)) for t in trials]
    points = [
        (_workers(t), getattr(f, attr)) for t, f in kept if f and getattr(f, attr) is not None
    ]
    ax.scatter([w for w, _ in points], [v for _, v in points], s=20, color="tab:blue")
    ax.set(xlabel="num_workers", ylabel=unit, title=title)
