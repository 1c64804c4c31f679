"""Optuna's own plots of a study, as PNG files for the sweep's parent run."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from loadertune._lazy import matplotlib, plt

_log = logging.getLogger(__name__)


def save_plots(study: optuna.Study, out: Path, objective: str) -> list[str]:
    """Optuna's optimisation history, importances, parallel coordinates and slice, as PNG."""
    matplotlib.use("Agg")

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    plots: dict[str, Any] = {
        "optimization_history.png": optuna.visualization.matplotlib.plot_optimization_history,
        "param_importances.png": optuna.visualization.matplotlib.plot_param_importances,
        "parallel_coordinate.png": optuna.visualization.matplotlib.plot_parallel_coordinate,
        "slice.png": optuna.visualization.matplotlib.plot_slice,
    }
    saved = []
    for name, plot in plots.items():
        if name == "param_importances.png" and (len(complete) < 2 or not _varied(complete)):
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ax = plot(study, target_name=objective)
            figure = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
            figure.savefig(out / name, dpi=100, bbox_inches="tight")
            plt.close(figure)
            saved.append(name)
        except (ValueError, RuntimeError, ZeroDivisionError) as exc:
            _log.info("skipped %s: %s", name, exc)
    return saved


def _varied(trials: list[FrozenTrial]) -> bool:
    keys = {k for t in trials for k in t.params}
    return any(len({str(t.params.get(k)) for t in trials}) > 1 for k in keys)
