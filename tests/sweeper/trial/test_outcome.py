"""Never twice in the search: a setting already answered, COMPLETE or PRUNED, is answered from
that trial and never started again; a small space is walked in order of promise."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import optuna
import pytest
from omegaconf import DictConfig, open_dict
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from hydra_plugins.loadertune_sweeper import _optuna_private
from hydra_plugins.loadertune_sweeper._optuna_schemas import TPESamplerConfig
from hydra_plugins.loadertune_sweeper.plan import _enumerate
from hydra_plugins.loadertune_sweeper.plan._samplers import create_sampler
from hydra_plugins.loadertune_sweeper.plan._sweep_plan import SweepPlan
from hydra_plugins.loadertune_sweeper.trial._outcome import answer_trial
from hydra_plugins.loadertune_sweeper.trial._trial_process import TrialOutcome
from loadertune.config._typed import RunConfig
from loadertune.record._channel import TrialStatus

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACE = {
    "loader.num_workers": IntDistribution(0, 2),
    "loader.prefetch_factor": CategoricalDistribution([1, 2, 4, 8]),
}


def _plan(space: dict[str, Any] | None = None) -> SweepPlan:
    return SweepPlan(dict(space or SPACE), {}, None, False, "", "", Path("."))  # type: ignore[arg-type]


class _Measurer:
    """Stands in for the trial process, whose timing this test does not need: the first call
    is pruned after two pruner reports, the rest complete; every call is counted."""

    def __init__(self) -> None:
        self.started: list[int] = []

    def __call__(self, trial: Any, job_cfg: DictConfig, config: RunConfig) -> TrialOutcome:
        self.started.append(trial.number)
        trial.report(9.0, step=5)
        trial.report(8.5, step=10)
        return TrialOutcome(status=TrialStatus.PRUNED, reason="pruned")


class _Composer:
    """The sweep's composer over the real ``conf/`` (``Composer`` needs Hydra's context)."""

    def __init__(self, compose: Callable[[Sequence[str]], DictConfig]) -> None:
        self.compose = compose
        self.config = compose([])

    def __call__(self, lines: list[str], job_num: int) -> DictConfig:
        cfg = self.compose(["model=simulated", "model.step_ms=1", *lines])
        with open_dict(cfg):
            cfg.hydra = {"job": {"num": job_num, "id": str(job_num)}}
        return cfg


@pytest.fixture
def composer(compose: Callable[[Sequence[str]], DictConfig]) -> _Composer:
    return _Composer(compose)


def _answer_and_tell(study: optuna.Study, plan: SweepPlan, composer: Any, measure: Any) -> Any:
    answer = answer_trial(study, study.ask(), plan, composer, measure)
    value = answer.value if answer.state == TrialState.COMPLETE else None
    if answer.reason:  # as tell_and_record keeps it
        answer.trial.set_user_attr("reason", answer.reason)
    return _optuna_private.tell(study, answer.trial, value, answer.state), answer


def test_a_pruned_setting_proposed_again_is_answered_not_started(
    tmp_path: Path, composer: Any
) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'optuna.db'}", study_name="s")
    plan, measure = _plan(), _Measurer()
    setting = {"loader.num_workers": 1, "loader.prefetch_factor": 8}
    study.enqueue_trial(setting)
    first, _ = _answer_and_tell(study, plan, composer, measure)
    assert first.state == TrialState.PRUNED and measure.started == [first.number]

    study.enqueue_trial(setting)
    again, answer = _answer_and_tell(study, plan, composer, measure)
    assert measure.started == [first.number]  # not started again
    assert answer.outcome is None and not answer.measured
    stored = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    repeat = stored.trials[again.number]
    assert repeat.state == TrialState.PRUNED
    assert repeat.user_attrs["repeat_of"] == first.number
    # The sampler sees it as it saw the original: the same reports, the same reason.
    assert repeat.intermediate_values == first.intermediate_values == {5: 9.0, 10: 8.5}
    assert repeat.user_attrs["reason"] == first.user_attrs["reason"] == "pruned"


def test_a_repeat_names_the_trial_that_measured(tmp_path: Path, composer: Any) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'optuna.db'}", study_name="s")
    plan, measure = _plan(), _Measurer()
    for _ in range(3):  # 0 workers with any prefetch factor is one setting
        study.enqueue_trial({"loader.num_workers": 0, "loader.prefetch_factor": 4})
    trials = [_answer_and_tell(study, plan, composer, measure)[0] for _ in range(3)]
    assert measure.started == [trials[0].number]
    assert [t.user_attrs.get("repeat_of") for t in trials] == [None, 0, 0]
    assert all(t.state == TrialState.PRUNED for t in trials)


def test_the_default_tpe_models_prefetch_with_the_workers_it_ran_with() -> None:
    node = TPESamplerConfig(seed=0)
    sampler = create_sampler({k: getattr(node, k) for k in vars(node)}, SPACE)
    study = optuna.create_study(sampler=sampler)
    proposed = []
    for _ in range(30):
        trial = study.ask()
        workers = trial.suggest_int("loader.num_workers", 0, 2)
        if workers:
            trial.suggest_categorical("loader.prefetch_factor", [1, 2, 4, 8])
        proposed.append(workers)
        study.tell(trial, 1.0 if workers == 1 else 3.0)
    # Joint and grouped: the fastest number of workers comes back most once TPE models.
    assert node.multivariate is True and node.group is True
    assert proposed[10:].count(1) > proposed[10:].count(0)


def test_a_small_space_is_walked_from_the_guess_outward() -> None:
    plan = _plan()
    every = plan.settings()
    assert every is not None and len(every) == 9
    order = _enumerate.in_order_of_promise(every, plan, center=1)
    assert order[0] == {"loader.num_workers": 1, "loader.prefetch_factor": 2}
    assert [s["loader.num_workers"] for s in order] == [1, 1, 1, 1, 0, 2, 2, 2, 2]
    assert [s.get("loader.prefetch_factor") for s in order[:4]] == [2, 1, 4, 8]


def _done(study: optuna.Study, params: dict[str, Any], state: TrialState) -> None:
    dists = {k: SPACE[k] for k in params}
    value = 1.0 if state == TrialState.COMPLETE else None
    study.add_trial(create_trial(params=params, distributions=dists, value=value, state=state))


def test_the_walk_waits_for_the_queue_and_the_budget(tmp_path: Path) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'optuna.db'}", study_name="s")
    plan = _plan()
    study.enqueue_trial({"loader.num_workers": 0})
    assert _enumerate.next_setting(study, plan, 20, center=1) is None  # a baseline waits
    trial = study.ask()
    trial.suggest_int("loader.num_workers", 0, 2)
    study.tell(trial, 2.0)
    _done(study, {"loader.num_workers": 1, "loader.prefetch_factor": 2}, TrialState.PRUNED)
    # Seven settings left: not walked with six trials left, walked with seven.
    assert _enumerate.next_setting(study, plan, 6, center=1) is None
    first = _enumerate.next_setting(study, plan, 7, center=1)
    assert first == {"loader.num_workers": 1, "loader.prefetch_factor": 1}
    assert not _enumerate.covered(study, plan)


def test_every_setting_answered_covers_the_space(tmp_path: Path) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'optuna.db'}", study_name="s")
    plan = _plan(
        {
            "loader.num_workers": IntDistribution(0, 1),
            **{"loader.prefetch_factor": CategoricalDistribution([1, 2])},
        }
    )
    _done(study, {"loader.num_workers": 0}, TrialState.COMPLETE)
    _done(study, {"loader.num_workers": 1, "loader.prefetch_factor": 1}, TrialState.PRUNED)
    assert not _enumerate.covered(study, plan)
    _done(study, {"loader.num_workers": 1, "loader.prefetch_factor": 2}, TrialState.COMPLETE)
    assert _enumerate.covered(study, plan)
    assert _enumerate.next_setting(study, plan, 10, center=0) is None


def test_a_favourite_asked_for_again_steers_to_its_nearest_unanswered_setting(
    tmp_path: Path,
) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'optuna.db'}", study_name="s")
    plan = _plan()
    favourite = {"loader.num_workers": 1, "loader.prefetch_factor": 2}
    _done(study, {"loader.num_workers": 0}, TrialState.COMPLETE)
    _done(study, favourite, TrialState.COMPLETE)
    _done(study, {"loader.num_workers": 1, "loader.prefetch_factor": 1}, TrialState.PRUNED)
    # One step away along prefetch (2 -> 4) or workers (1 -> 2): the same worker count first.
    nearest = _enumerate.nearest_unanswered(study, plan, favourite)
    assert nearest == {"loader.num_workers": 1, "loader.prefetch_factor": 4}
    _done(study, nearest, TrialState.PRUNED)
    assert _enumerate.nearest_unanswered(study, plan, favourite) == {
        "loader.num_workers": 2,
        "loader.prefetch_factor": 2,
    }
    study.enqueue_trial({"loader.num_workers": 2, "loader.prefetch_factor": 8})
    assert _enumerate.nearest_unanswered(study, plan, favourite) is None  # one waits already


def test_a_favourite_in_a_covered_space_steers_nowhere(tmp_path: Path) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'optuna.db'}", study_name="s")
    plan = _plan({"loader.num_workers": IntDistribution(0, 1)})
    _done(study, {"loader.num_workers": 0}, TrialState.COMPLETE)
    _done(study, {"loader.num_workers": 1}, TrialState.COMPLETE)
    assert _enumerate.nearest_unanswered(study, plan, {"loader.num_workers": 0}) is None


class _Recording:
    """Stands in for the trial process and keeps the config each trial was measured with."""

    def __init__(self) -> None:
        self.configs: list[RunConfig] = []

    def __call__(self, trial: Any, job_cfg: DictConfig, config: RunConfig) -> TrialOutcome:
        assert job_cfg.trial.precision == config.trial.precision  # the job runs what is kept
        self.configs.append(config)
        return TrialOutcome(status=TrialStatus.PRUNED, reason="pruned")


def test_the_search_window_shortens_the_measured_job_only(tmp_path: Path, composer: Any) -> None:
    from hydra_plugins.loadertune_sweeper.verdict._rounds import ROUND_WINDOW

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'optuna.db'}", study_name="s")
    plan, measure = _plan(), _Recording()
    setting = {"loader.num_workers": 1, "loader.prefetch_factor": 2}
    study.enqueue_trial(setting)
    study.enqueue_trial({**setting, "loader.num_workers": 2})
    short = answer_trial(study, study.ask(), plan, composer, measure, None, tuple(ROUND_WINDOW))
    precise = answer_trial(study, study.ask(), plan, composer, measure)
    assert [c.trial.precision for c in measure.configs] == [None, 0.02]
    # What the trial keeps (its overrides, rerun by the verdict) are its settings alone, and
    # its effective key is the key it would have with the trial's own window.
    kept = short.trial.user_attrs["overrides"]
    assert not any(line.startswith("trial.precision") for line in kept)
    assert "precision: null" in short.yaml and "precision: 0.02" in precise.yaml
    study.enqueue_trial(setting)
    again = answer_trial(study, study.ask(), plan, composer, measure)
    assert again.trial.user_attrs["effective_key"] == short.trial.user_attrs["effective_key"]


def test_the_search_window_setting_is_checked_and_follows_the_verdict() -> None:
    from hydra_plugins.loadertune_sweeper.config import SweepSettings
    from hydra_plugins.loadertune_sweeper.engine._next import search_window
    from hydra_plugins.loadertune_sweeper.plan._settings_checks import check_settings
    from loadertune.errors import ConfigError

    assert search_window(SweepSettings()) == ("trial.precision=null",)
    assert search_window(SweepSettings(verdict_repeats=0)) == ()
    assert search_window(SweepSettings(search_window="precise")) == ()
    with pytest.raises(ConfigError, match=r"hydra\.sweeper\.search_window.*steps, precise"):
        check_settings(SweepSettings(search_window="long"))
