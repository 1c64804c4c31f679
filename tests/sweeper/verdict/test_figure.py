"""The verdict's figure, drawn from a recorded study: every label and the legend stay readable."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.distributions import IntDistribution
from optuna.trial import create_trial

from hydra_plugins.loadertune_sweeper.verdict._candidates import Candidate, candidates
from hydra_plugins.loadertune_sweeper.verdict._figure import draw_verdict, verdict_figure
from loadertune.decision import Bound, Guess

# (num_workers, ms per sample, baseline label): a loader that 0 workers leaves waiting.
RECORDED = [
    (0, 9.0, "default"),
    (2, 4.1, "start_small"),
    (4, 2.3, "doubling"),
    (8, 2.2, "rule_of_thumb"),
    (3, 2.9, "model_guess"),
    (5, 2.25, None),
    (6, 2.3, None),
]
# The verdict's three rounds for each candidate, on a machine whose speed moves alike for
# all: 4 workers is shown as fast as the fastest (8), 0.4% slower in every round.
DRIFT = [1.0, 1.03, 0.98]
TRUE_MS = {0: 9.0, 2: 4.1, 3: 2.9, 4: 2.26, 5: 2.3, 8: 2.25}
REPEATS = {w: [ms * d for d in DRIFT] for w, ms in TRUE_MS.items()}


def recorded_study() -> tuple[optuna.Study, list[Candidate]]:
    """A study of the recorded trials and the verdict's candidates with three repeats each."""
    study = optuna.create_study(study_name="recorded-study-with-a-long-name@host-0123456789abcdef")
    for workers, ms, label in RECORDED:
        attrs = {
            "data_wait_fraction": min(1.0, 0.9 * ms / 9.0),
            "peak_memory_mb": 300.0 + 120.0 * workers,
            "cpu_percent_mean": 100.0 + 40.0 * workers,
        }
        if label:
            attrs["baseline"] = label
        study.add_trial(
            create_trial(
                params={"loader.num_workers": workers},
                distributions={"loader.num_workers": IntDistribution(0, 8)},
                value=ms,
                user_attrs=attrs,
            )
        )
    cands = candidates(study.get_trials(), top=2)
    for c in cands:
        c.values = list(REPEATS[c.workers])
        c.rounds = [0, 1, 2]
    return study, cands


GUESS = Guess(
    workers=3,
    time_per_sample_ms=3.0,
    load_ms_per_batch=60.0,
    step_ms=20.0,
    cpu_share_of_loading=1.0,
    bound=Bound.HIDES_LOADING,
)


def test_the_figure_is_written(tmp_path: Path) -> None:
    study, cands = recorded_study()
    out = verdict_figure(study, cands, GUESS, tmp_path / "verdict.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_labels_stay_inside_the_figure_and_the_legend_off_the_data() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    study, cands = recorded_study()
    fig = draw_verdict(study, cands, GUESS)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        # Everything drawn (titles, tick and axis labels, the legend) lies on the canvas.
        drawn, canvas = fig.get_tightbbox(renderer), fig.bbox_inches
        assert canvas.x0 - 0.01 <= drawn.x0 and drawn.x1 <= canvas.x1 + 0.01, drawn
        assert canvas.y0 - 0.01 <= drawn.y0 and drawn.y1 <= canvas.y1 + 0.01, drawn
        (legend,) = fig.legends
        shown = {t.get_text() for t in legend.get_texts()}
        assert "recommended: num_workers=4" in shown  # the cheapest shown as fast as the best
        assert "model-based prediction" in shown
        assert not any(ax.get_legend() for ax in fig.axes)
        where = legend.get_window_extent(renderer)
        for ax in fig.axes:
            assert not where.overlaps(ax.get_window_extent(renderer))
    finally:
        plt.close(fig)


@pytest.mark.parametrize("measured", [False, True])
def test_a_verdict_without_repeats_still_draws(tmp_path: Path, measured: bool) -> None:
    study, cands = recorded_study()
    if not measured:
        for c in cands:
            c.values.clear()
            c.rounds.clear()
    out = verdict_figure(study, cands, None, tmp_path / "verdict.png")
    assert out.stat().st_size > 0


def test_every_label_is_readable_and_the_pick_is_named_inside_its_panel() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    from hydra_plugins.loadertune_sweeper.verdict._figure import FONTS

    study, cands = recorded_study()
    with plt.rc_context(FONTS):  # the sizes verdict_figure draws with
        fig = draw_verdict(study, cands, GUESS)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        shown = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
        assert min(t.get_fontsize() for t in shown) >= 10
        time_panel = fig.axes[0]
        (named,) = [t for t in time_panel.texts if "recommended" in t.get_text()]
        inside = time_panel.get_window_extent(renderer)
        box = named.get_window_extent(renderer)
        assert inside.x0 <= box.x0 and box.x1 <= inside.x1, (box, inside)
        assert inside.y0 <= box.y0 and box.y1 <= inside.y1, (box, inside)
    finally:
        plt.close(fig)


def test_optuna_plots_name_the_objective(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as ovm

    from hydra_plugins.loadertune_sweeper.record import _mlflow_runs, _plots

    names: dict[str, str] = {}

    def spy(name: str) -> object:
        def plot(study: optuna.Study, **kwargs: str) -> object:
            names[name] = kwargs["target_name"]
            return plt.subplots()[1]  # Optuna's own drawing is not what is tested here

        return plot

    plots = ("history", "param_importances", "parallel_coordinate", "slice")
    for name in plots:
        attr = "plot_optimization_history" if name == "history" else f"plot_{name}"
        monkeypatch.setattr(ovm, attr, spy(name))
    study, _ = recorded_study()
    assert len(_plots.save_plots(study, tmp_path, _mlflow_runs.OBJECTIVE)) == 4
    assert names == dict.fromkeys(plots, "time per sample (ms)")
