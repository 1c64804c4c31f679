"""Schemas of Optuna's samplers and pruners: groups ``hydra/sweeper/sampler`` and ``/pruner``.

Each names an Optuna class by its ``_target_`` string, without importing Optuna, and lists the
options the sweeper passes on once it knows the search space (``plan/_samplers.create_sampler``).
Every option is checked against Optuna >= 4 (verified on 5.0.0).
"""

# No "from __future__ import annotations": see config.py.

from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

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

    # Model the parameters jointly (true) or one by one (false); null keeps Optuna's default.
    # Jointly: prefetch_factor is judged together with the num_workers it ran with.
    multivariate: bool | None = True

    # Split the search space into groups of parameters that occur together (experimental in
    # Optuna; needs multivariate). On: prefetch_factor, suggested only with workers, is
    # modelled on the trials that had workers, and 0 workers as the one setting it is,
    # instead of falling back to independent sampling for the conditional parameter.
    group: bool = True

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
class IntervalPrunerConfig(PrunerConfig):
    """The default: prune a trial only when its measured interval lies above the best
    trial's by more than ``tolerance`` (loadertune's own pruner, robust to a shared
    machine's noise; see ``trial/_noise_pruner.py``). Each trial's timed steps are cut into
    blocks of whole arrival cycles, and the interval is that of their median.
    """

    _target_: str = "hydra_plugins.loadertune_sweeper.trial._noise_pruner.IntervalPruner"

    # How much slower than the best trial's interval (0.05: 5%) a trial's interval must lie
    # to be pruned: a setting within noise of the best is never pruned.
    tolerance: float = 0.05

    # Complete trials measured before any pruning. Three, as for the median pruner: a loader
    # sweep has few, long trials, and its first are the baselines the verdict compares.
    n_startup_trials: int = 3

    # Timed steps of each trial that are never pruned.
    n_warmup_steps: int = 10

    # Blocks of steps a trial's interval needs before it can be pruned, >= 3.
    min_blocks: int = 3


@dataclass
class NopPrunerConfig(PrunerConfig):
    """Never prune: every trial runs its full measurement.

    https://optuna.readthedocs.io/en/stable/reference/generated/optuna.pruners.NopPruner.html
    """

    _target_: str = "optuna.pruners.NopPruner"


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
    "interval": IntervalPrunerConfig,
    "median": MedianPrunerConfig,
    "percentile": PercentilePrunerConfig,
    "hyperband": HyperbandPrunerConfig,
    "none": NopPrunerConfig,
}
