"""Config schemas of the loadertune sweeper, stored in Hydra's ConfigStore.

The layout follows the official ``hydra-optuna-sweeper`` plugin (same group names, same key
names, same sweep grammar) so its documentation and habits carry over, but every option is
checked against Optuna >= 4 (verified on 5.0.0): samplers and pruners are chosen with
``hydra/sweeper/sampler=<name>`` and ``hydra/sweeper/pruner=<name>`` and tuned with
``hydra.sweeper.sampler.<option>=...``.

Hydra imports every public module under ``hydra_plugins`` at every start, so this module
imports only Hydra and the standard library: the ``_target_`` strings name Optuna classes
without importing Optuna. The sweeper builds the sampler and pruner from these nodes later
(see ``_samplers.create_sampler``), once it knows the search space.
"""

# No "from __future__ import annotations": Hydra's plugin scanner loads this module without
# registering it in sys.modules, and dataclasses then fail to resolve string annotations.

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

_PROVIDER = "loadertune"


# ============================================================
# Sampler configs: group hydra/sweeper/sampler
# ============================================================


@dataclass
class SamplerConfig:
    """Fields every sampler shares.

    https://optuna.readthedocs.io/en/stable/reference/samplers/index.html
    """

    # Optuna sampler class to build.
    _target_: str = MISSING

    # Seed of the sampler's random number generator; null draws a fresh seed each run.
    # Set it to make a sweep's sequence of proposals reproducible.
    seed: int | None = None


@dataclass
class TPESamplerConfig(SamplerConfig):
    """Tree-structured Parzen Estimator: the default, good with mixed discrete spaces.

    Optuna 5 deprecates ``consider_prior``, ``prior_weight``, ``consider_magic_clip``,
    ``consider_endpoints``, ``gamma``, ``weights`` and ``warn_independent_sampling`` (passing
    any of them emits a FutureWarning), so this schema leaves them out.

    https://optuna.readthedocs.io/en/stable/reference/samplers/generated/optuna.samplers.TPESampler.html
    """

    _target_: str = "optuna.samplers.TPESampler"

    # Trials sampled at random before TPE starts modelling the results.
    n_startup_trials: int = 10

    # Candidates drawn per proposal to pick the most promising one from.
    n_ei_candidates: int = 24

    # Model the parameters jointly (true) or one by one (false). null keeps Optuna's default,
    # which changed in Optuna 5: joint for single-objective studies, independent otherwise.
    multivariate: bool | None = None

    # Split the search space into groups of parameters that occur together
    # (experimental in Optuna; needs multivariate). Useful with conditional parameters.
    group: bool = False

    # Treat trials still running as bad results when proposing new ones, so that workers
    # sharing one study (several hosts) do not all measure the same setting.
    # Optuna 5's default; Optuna 4 defaulted to false.
    constant_liar: bool = True


@dataclass
class RandomSamplerConfig(SamplerConfig):
    """Independent uniform sampling: a baseline, and a safe choice for tiny budgets.

    https://optuna.readthedocs.io/en/stable/reference/samplers/generated/optuna.samplers.RandomSampler.html
    """

    _target_: str = "optuna.samplers.RandomSampler"


@dataclass
class GridSamplerConfig(SamplerConfig):
    """Every combination of the listed values, each once (in a random order).

    Every parameter needs a finite set of values: ``choice(...)`` or ``range(...)``, or an
    ``int(interval(...))``. The sweeper caps the trials it runs at the size of the grid.

    https://optuna.readthedocs.io/en/stable/reference/samplers/generated/optuna.samplers.GridSampler.html
    """

    _target_: str = "optuna.samplers.GridSampler"

    # Values to try per parameter, e.g. {batch_size: [32, 64], loader.num_workers: [0, 4]}.
    # null (recommended): built by the sweeper from hydra.sweeper.params and the
    # command-line sweeps, so the grid and the search space cannot disagree.
    search_space: dict[str, Any] | None = None


@dataclass
class GPSamplerConfig(SamplerConfig):
    """Gaussian-process Bayesian optimisation: sample-efficient for small numeric spaces.

    Needs ``scipy`` and ``torch`` at run time.

    https://optuna.readthedocs.io/en/stable/reference/samplers/generated/optuna.samplers.GPSampler.html
    """

    _target_: str = "optuna.samplers.GPSampler"

    # Trials sampled at random before the Gaussian process is fitted.
    n_startup_trials: int = 10

    # Set true only if measuring one setting twice gives the same value. Loader timings are
    # noisy, so keep false.
    deterministic_objective: bool = False


@dataclass
class QMCSamplerConfig(SamplerConfig):
    """Quasi-Monte Carlo: spreads trials evenly over the space (experimental in Optuna).

    https://optuna.readthedocs.io/en/stable/reference/samplers/generated/optuna.samplers.QMCSampler.html
    """

    _target_: str = "optuna.samplers.QMCSampler"

    # Low-discrepancy sequence: "sobol" or "halton" (Optuna 5 accepts only these two).
    qmc_type: str = "sobol"

    # Randomise the sequence (uses seed). With several workers on one study, set a seed so
    # they all follow the same sequence.
    scramble: bool = False


@dataclass
class CmaEsSamplerConfig(SamplerConfig):
    """CMA-ES evolution strategy for numeric spaces (needs the ``cmaes`` package).

    Categorical parameters are sampled independently (at random) beside it.

    https://optuna.readthedocs.io/en/stable/reference/samplers/generated/optuna.samplers.CmaEsSampler.html
    """

    _target_: str = "optuna.samplers.CmaEsSampler"

    # Starting point per parameter name; null starts at the centre of the space.
    x0: dict[str, Any] | None = None

    # Initial step size; null lets Optuna derive it from the ranges (min range / 6).
    sigma0: float | None = None

    # Trials sampled by the independent sampler before CMA-ES starts.
    n_startup_trials: int = 1

    # Individuals per generation; null lets Optuna size it from the dimension.
    popsize: int | None = None

    # Also learn from pruned trials (their last reported value).
    consider_pruned_trials: bool = False

    # Diagonal-covariance CMA-ES: cheaper, for many loosely coupled parameters
    # (experimental).
    use_separable_cma: bool = False

    # CMA-ES with margin, which keeps integer parameters from freezing (experimental).
    with_margin: bool = False


@dataclass
class BruteForceSamplerConfig(SamplerConfig):
    """Every point of a finite space, each once, in a random order (experimental in Optuna).

    Unlike ``grid`` it also covers spaces whose parameters appear conditionally. Continuous
    parameters (``interval(...)`` on floats) are refused.

    https://optuna.readthedocs.io/en/stable/reference/samplers/generated/optuna.samplers.BruteForceSampler.html
    """

    _target_: str = "optuna.samplers.BruteForceSampler"

    # Keep going until every branch of a conditional space is known to be finished.
    avoid_premature_stop: bool = False


# ============================================================
# Pruner configs: group hydra/sweeper/pruner
# ============================================================


@dataclass
class PrunerConfig:
    """Fields every pruner shares.

    A pruner stops a trial early when the values it reports while running are worse than
    those of earlier trials at the same step.

    https://optuna.readthedocs.io/en/stable/reference/pruners.html
    """

    # Optuna pruner class to build.
    _target_: str = MISSING


@dataclass
class MedianPrunerConfig(PrunerConfig):
    """Prune a trial whose best value so far is worse than the median of earlier trials.

    https://optuna.readthedocs.io/en/stable/reference/generated/optuna.pruners.MedianPruner.html
    """

    _target_: str = "optuna.pruners.MedianPruner"

    # Finished trials needed before any pruning. Three, not Optuna's five: a loader sweep has
    # few, long trials.
    n_startup_trials: int = 3

    # Timed steps of each trial that are never pruned: time per sample over the first few
    # steps of a multi-worker loader is bursty, so early values say little.
    n_warmup_steps: int = 10

    # Check for pruning every this many reported steps.
    interval_steps: int = 1

    # Trials that must have reported at a step before pruning can happen at that step.
    n_min_trials: int = 1


@dataclass
class PercentilePrunerConfig(PrunerConfig):
    """Prune a trial that is not in the best ``percentile`` percent of earlier trials.

    https://optuna.readthedocs.io/en/stable/reference/generated/optuna.pruners.PercentilePruner.html
    """

    _target_: str = "optuna.pruners.PercentilePruner"

    # Percentile of trials to keep, in [0, 100]; 50 behaves like the median pruner, lower
    # values prune harder.
    percentile: float = 25.0

    # Finished trials needed before any pruning.
    n_startup_trials: int = 2

    # Reported steps of each trial that are never pruned (the trial's own warm-up).
    n_warmup_steps: int = 0

    # Check for pruning every this many reported steps.
    interval_steps: int = 1

    # Trials that must have reported at a step before pruning can happen at that step.
    n_min_trials: int = 1


@dataclass
class HyperbandPrunerConfig(PrunerConfig):
    """Successive halving over several brackets of budgets.

    https://optuna.readthedocs.io/en/stable/reference/generated/optuna.pruners.HyperbandPruner.html
    """

    _target_: str = "optuna.pruners.HyperbandPruner"

    # Smallest number of reported steps a trial gets before it can be pruned.
    min_resource: int = 1

    # Largest number of reported steps of a trial, or "auto" to learn it from the first
    # finished trial. Typed Any because OmegaConf 2.3 cannot type Union[str, int].
    max_resource: Any = "auto"

    # Keep 1 / reduction_factor of the trials at each rung.
    reduction_factor: int = 3

    # Trials a bracket needs at a rung before it prunes there.
    bootstrap_count: int = 0


@dataclass
class NopPrunerConfig(PrunerConfig):
    """Never prune: every trial runs its full measurement.

    https://optuna.readthedocs.io/en/stable/reference/generated/optuna.pruners.NopPruner.html
    """

    _target_: str = "optuna.pruners.NopPruner"


# ============================================================
# The sweeper: group hydra/sweeper, name loadertune
# ============================================================

defaults = [{"sampler": "tpe"}, {"pruner": "median"}, "_self_"]


@dataclass
class LoadertuneSweeperConf:
    """Settings of one sweep: ``hydra/sweeper=loadertune`` selects it.

    Key names match the official Optuna sweeper (``direction``, ``storage``, ``study_name``,
    ``n_trials``, ``n_jobs``, ``max_failure_rate``, ``params``, ``custom_search_space``,
    ``sampler``) so its configs and documentation carry over.
    """

    _target_: str = "hydra_plugins.loadertune_sweeper.loadertune_sweeper.LoadertuneSweeper"

    # Hand sampler and pruner to the sweeper as config nodes rather than as built objects:
    # some samplers (grid, bruteforce) can only be built, or checked, once the search
    # space is known, and Hydra would otherwise instantiate them first.
    _recursive_: bool = False

    # The numeric settings below are typed Any on purpose: the sweeper checks their types and
    # ranges itself (see _validate.py) so a bad value gets one line naming the key and the fix,
    # rather than Hydra's multi-line composition error.

    defaults: list[Any] = field(default_factory=lambda: list(defaults))

    # Sampling algorithm: hydra/sweeper/sampler=tpe|random|grid|gp|qmc|cmaes|bruteforce.
    # https://optuna.readthedocs.io/en/stable/reference/samplers/index.html
    sampler: Any = MISSING

    # Early stopping of poor trials: hydra/sweeper/pruner=median|percentile|hyperband|none.
    # https://optuna.readthedocs.io/en/stable/reference/pruners.html
    pruner: Any = MISSING

    # Direction of optimisation: "minimize" or "maximize", or a list of them for a
    # multi-objective study. The objective, time per sample, is minimised.
    direction: Any = "minimize"

    # Storage URL of the Optuna study, e.g. "sqlite:////abs/path/optuna.db" or a
    # PostgreSQL/MySQL URL shared by several hosts. null: an SQLite file under outputs/,
    # chosen and made absolute by the sweeper so a sweep can be resumed.
    # https://optuna.readthedocs.io/en/stable/reference/storages.html
    storage: str | None = None

    # Name of the study inside the storage; running again with the same name resumes it.
    # null: derived by the sweeper from the task (see the sweeper's documentation).
    study_name: str | None = None

    # Trials this invocation runs (as in the official plugin), whatever the study already
    # holds. With the grid sampler, more than the grid's size measures points again.
    n_trials: Any = 20

    # Optional cap on the finished trials of the whole study, across invocations and
    # hosts: once reached, an invocation runs nothing more. null: no cap.
    max_trials_total: Any = None

    # Trials launched per batch. Values above 1 run trials at the same time and need
    # allow_parallel_trials=true when they share a host.
    n_jobs: Any = 1

    # Allow n_jobs > 1 on one host. Trials that run together on one machine disturb each
    # other's timings, so this is off; scale out with several hosts on one study instead.
    allow_parallel_trials: bool = False

    # Highest tolerated fraction of failed trials, in [0, 1]; above it the sweep stops and
    # reports the failure. 0.0: the first failure stops the sweep.
    max_failure_rate: Any = 0.0

    # Timed steps between two reports of a trial's time per sample so far to the pruner,
    # >= 1. Each report is a database write in the sweep process while the trial measures,
    # so reports are batched rather than sent every step.
    report_every: Any = 5

    # Budget for the memory of a trial's process tree (main process and DataLoader workers,
    # summed PSS), in MB. The sweep process samples the tree a few times a second and stops
    # a trial that passes it (recorded PRUNED, reason memory_budget) before the machine swaps
    # or the OOM killer strikes. null: 3/4 of the memory available when the sweep starts.
    memory_budget_mb: Any = None

    # Seconds a trial may go without reporting a step before it counts as hung (reason
    # timeout) and its whole process group is killed. Covers set-up and the first batch too.
    stall_timeout_s: Any = 60.0

    # Wall-clock limit of one trial process in seconds. null: trial.time_limit_s + 120 s
    # (the timed window's own limit plus room for set-up and worker start-up).
    trial_timeout_s: Any = None

    # The verdict at the end of a sweep: the verdict_top fastest settings and the baselines
    # (default, rule of thumb, start-at-2 path) are measured verdict_repeats times more,
    # interleaved, and the cheapest setting within the noise of the fastest is recommended
    # and exported as best_loader.yaml. verdict_repeats=0 skips it.
    verdict_top: Any = 3
    verdict_repeats: Any = 3

    # Let the model-based guess (after the num_workers=0 trial) set the num_workers range the
    # sampler searches: wider than written when loading waits on I/O and needs more workers
    # than the CPUs (up to 1.5 x the guess, 8 per CPU at most), narrower (2 x the guess) when
    # a few workers hide loading. Only for an int range; false keeps the range as written.
    guess_range: bool = True

    # Search space: one Hydra sweep expression per config key, e.g.
    #   loader.batch_size: choice(32, 64, 128)
    #   loader.num_workers: range(0, 9, 2)        # stop is exclusive: 0, 2, 4, 6, 8
    #   loader.prefetch_factor: int(interval(1, 8))
    # Plain values are fixed for every trial. A command-line override of the same key wins.
    params: dict[str, str] | None = None

    # Dotted path of a function (cfg: DictConfig, trial: optuna.trial.Trial) -> None that
    # suggests further, e.g. conditional, parameters after the ones above (experimental, as
    # in the official plugin).
    custom_search_space: str | None = None

    # What n_trials counts: "invocation" (the trials this command runs, as in the official
    # plugin) or "study" (the study's total: each host running the same command stops once the
    # study holds n_trials trials, so N hosts together run n_trials). Trials lost with a dead
    # sweep (reason interrupted) do not count, and are run again.
    count_trials: str = "invocation"

    # Sweep workers to start through the Hydra launcher, each on its own host running one
    # trial at a time against the shared storage, e.g. hydra/launcher=loadertune_slurm
    # hydra.sweeper.workers=8 (whole SLURM nodes). > 1 needs count_trials=study. With Hydra's
    # basic launcher (the default) this process runs the sweep itself.
    workers: Any = 1

    # Join a study although this host's machine fingerprint (CPU model and count, memory,
    # GPUs, torch version) differs from the one the study was measured on. Off: such a host is
    # refused, since timings from different hardware do not compare.
    force_fingerprint: bool = False


# Option names in hydra/sweeper/sampler and hydra/sweeper/pruner.
SAMPLER_CONFIGS: dict[str, type[SamplerConfig]] = {
    "tpe": TPESamplerConfig,
    "random": RandomSamplerConfig,
    "grid": GridSamplerConfig,
    "gp": GPSamplerConfig,
    "qmc": QMCSamplerConfig,
    "cmaes": CmaEsSamplerConfig,
    "bruteforce": BruteForceSamplerConfig,
}
PRUNER_CONFIGS: dict[str, type[PrunerConfig]] = {
    "median": MedianPrunerConfig,
    "percentile": PercentilePrunerConfig,
    "hyperband": HyperbandPrunerConfig,
    "none": NopPrunerConfig,
}


def _register() -> None:
    """Store every schema under its Hydra group, so YAML and overrides can select it."""
    store = ConfigStore.instance()
    store.store(
        group="hydra/sweeper", name="loadertune", node=LoadertuneSweeperConf, provider=_PROVIDER
    )
    for name, sampler in SAMPLER_CONFIGS.items():
        store.store(group="hydra/sweeper/sampler", name=name, node=sampler, provider=_PROVIDER)
    for name, pruner in PRUNER_CONFIGS.items():
        store.store(group="hydra/sweeper/pruner", name=name, node=pruner, provider=_PROVIDER)


_register()
