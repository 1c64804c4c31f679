"""Config schemas of the loadertune sweeper, stored in Hydra's ConfigStore.

The layout follows the official ``hydra-optuna-sweeper`` plugin (same group names, same key
names, same sweep grammar) so its documentation and habits carry over, but every option is
checked against Optuna >= 4 (verified on 5.0.0): samplers and pruners are chosen with
``hydra/sweeper/sampler=<name>`` and ``hydra/sweeper/pruner=<name>`` and tuned with
``hydra.sweeper.sampler.<option>=...``.

Hydra imports every public module under ``hydra_plugins`` at every start, so this module
imports only Hydra, OmegaConf and the standard library: the ``_target_`` strings name Optuna classes
without importing Optuna. The sweeper builds the sampler and pruner from these nodes later
(see ``plan/_samplers.create_sampler``), once it knows the search space.

One default per key: ``conf/config.yaml`` (its ``hydra.sweeper`` node, with its comments) is
the source of truth users read, and every default here equals it but ``params`` (the default
study's space is the app's, written there once); ``tests/config/test_defaults.py`` composes
both and compares them key by key.
"""

# No "from __future__ import annotations": Hydra's plugin scanner loads this module without
# registering it in sys.modules, and dataclasses then fail to resolve string annotations.

from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from ._optuna_schemas import (
    PRUNER_CONFIGS,
    SAMPLER_CONFIGS,
    PrunerConfig,
    SamplerConfig,
)

__all__ = [
    "PRUNER_CONFIGS",
    "SAMPLER_CONFIGS",
    "SWEEPER_NODE",
    "PrunerConfig",
    "SamplerConfig",
    "SweepSettings",
]

_PROVIDER = "loadertune"

# ============================================================
# The sweeper: group hydra/sweeper, name loadertune
# ============================================================

defaults = [{"sampler": "tpe"}, {"pruner": "interval"}, "_self_"]


@dataclass
class SweepSettings:
    """The ``hydra.sweeper`` settings of one sweep, as the engine reads them.

    Key names match the official Optuna sweeper (``direction``, ``storage``, ``study_name``,
    ``n_trials``, ``max_failure_rate``, ``params``, ``custom_search_space``, ``sampler``) so
    its configs and documentation carry over; its ``n_jobs`` is not one: trials never share a
    machine (several hosts on one study scale out instead, see docs/scale-out.md). Hydra
    composes the ``hydra.sweeper`` node untyped (:data:`SWEEPER_NODE`); the sweeper converts
    it into this dataclass once (``plan/_settings_checks.sweep_settings``), so OmegaConf's own
    type error names the key in one line, as ``loadertune.config._typed.to_run_config`` does for a
    trial.
    """

    # Sampling algorithm: hydra/sweeper/sampler=tpe|random|grid|gp|qmc|cmaes|bruteforce.
    # https://optuna.readthedocs.io/en/stable/reference/samplers/index.html
    sampler: Any = MISSING

    # Early stopping of poor trials: hydra/sweeper/pruner=interval|median|percentile|hyperband|
    # none (interval, the default: only a trial whose interval is beyond the best's).
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
    n_trials: int = 12

    # Optional cap on the finished trials of the whole study, across invocations and
    # hosts: once reached, an invocation runs nothing more. null: no cap.
    max_trials_total: int | None = None

    # Let several sweeps time on one host at once: workers started on this host by a local
    # launcher (hydra/launcher=submitit_local), and no host timing lock (host_lock counts as
    # off). Trials that run together on one machine disturb each other's timings, so this is
    # off; scale out with several hosts on one study instead (tests and demos insist).
    allow_parallel_trials: bool = False

    # One timing process per host: a sweep holds this host's timing lock from its first trial
    # to its verdict. "wait": a second sweep (or a single trial) on the host waits for it,
    # saying who holds it; "refuse": it stops at once with exit status 75, naming the holder;
    # "off": no lock. allow_parallel_trials=true also means off.
    host_lock: str = "wait"

    # Highest tolerated fraction of failed trials, in [0, 1]; above it the sweep stops and
    # reports the failure. 0.0: the first failure stops the sweep; 1.0: crashes never stop
    # it alone.
    max_failure_rate: float = 1.0

    # Timed steps between two reports of a trial's time per sample so far to the pruner,
    # >= 1. Each report is a database write in the sweep process while the trial measures,
    # so reports are batched rather than sent every step.
    report_every: int = 5

    # Budget for the memory of a trial's process tree (main process and DataLoader workers,
    # summed PSS), in MB. The sweep process samples the tree a few times a second and stops
    # a trial that passes it (recorded PRUNED, reason memory_budget) before the machine swaps
    # or the OOM killer strikes. null: 3/4 of the memory available when the sweep starts.
    memory_budget_mb: float | None = None

    # Seconds a trial may take from its start to its first reported step: the dataset's
    # set-up (a stream listing its shards, filling a shuffle buffer), the pre-flight checks,
    # worker start-up and the first batch. Past it the trial counts as hung (reason timeout)
    # and its whole process group is killed. A slow stream needs more; a hang costs this long.
    startup_timeout_s: float = 300.0

    # Seconds a trial may go without reporting a step once it has reported one, before it
    # counts as hung (reason timeout) and its whole process group is killed.
    stall_timeout_s: float = 60.0

    # Wall-clock limit of one trial process in seconds. null: trial.time_limit_s +
    # startup_timeout_s (the timed window's own limit plus the start-up's).
    trial_timeout_s: float | None = None

    # The verdict at the end of a sweep: the verdict_top fastest settings and the baselines
    # (default, rule of thumb, start-at-2 path) are measured again, interleaved, in up to
    # 2 x verdict_repeats rounds, and the cheapest setting shown as fast as the fastest (within
    # 2%) is recommended and exported as best_loader.yaml. verdict_repeats=0 skips it.
    verdict_top: int = 3
    verdict_repeats: int = 3
    # Hours the tuned loader will train: a verdict round for a setting that may beat the pick
    # runs only while the throughput it is expected to win back, over that many hours, is worth
    # the round's seconds. null: while it is expected to win back 0.5% of throughput.
    train_hours: float | None = None

    # How long a search trial times: "steps" (with a verdict to follow) exactly trial.steps
    # timed steps, as a verdict round does, since the verdict re-measures the candidates
    # interleaved and a longer search window only refines a figure the verdict replaces;
    # "precise": the trial's own rule (time until trial.precision, up to trial.max_steps).
    # Without a verdict (verdict_repeats=0) search trials always use the trial's own rule.
    search_window: str = "steps"

    # Let the model-based guess (after the num_workers=0 trial) set the num_workers range the
    # sampler searches: wider than written when loading waits on I/O and needs more workers
    # than the CPUs (up to 1.5 x the guess, as far as memory, /dev/shm, descriptors and a
    # streaming dataset's shards allow, loadertune.checks._preflight.worker_cap: no multiple of the
    # CPUs), narrower (2 x the guess) when a few workers hide loading. Only for an int range;
    # false keeps the range as written.
    guess_range: bool = True

    # Stop the search before n_trials once no loader setting left can beat the fastest
    # measured: its step waited for data no more than the verdict's 2% tolerance (the loader
    # is hidden), or its trial kept 90% of the usable CPUs busy (more workers cannot add
    # CPU), with one worker fewer and more workers measured; or, in a range widened for I/O,
    # the tail is ridden out (plan._ceiling). Only for a
    # space of num_workers and prefetch_factor; never for the grid or brute-force samplers.
    # false measures on to the budget.
    stop_at_ceiling: bool = True

    # Search space: one Hydra sweep expression per config key, e.g.
    #   loader.batch_size: choice(32, 64, 128)
    #   loader.num_workers: range(0, 9, 2)        # stop is exclusive: 0, 2, 4, 6, 8
    #   loader.prefetch_factor: int(interval(1, 8))
    # Plain values are fixed for every trial. A command-line override of the same key wins.
    # null here: the default study's space is the app's, written once in conf/config.yaml
    # (its num_workers range needs loadertune's ${loadertune.max_workers:...} resolver).
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
    workers: int = 1

    # Join a study although this host's machine fingerprint (CPU model and count, memory,
    # GPUs, torch version) differs from the one the study was measured on. Off: such a host is
    # refused, since timings from different hardware do not compare.
    force_fingerprint: bool = False

    # Other work on this machine: the CPU that processes outside the trial use, measured
    # around every timed window (a trial's other_cpu_percent). "warn": say so at the start
    # when the machine is already busy, and at the end when other work touched the results.
    # "wait": also, before each timed window, wait until other work stays under
    # busy_cpu_percent (at most busy_wait_s), and measure once more a setting whose window
    # saw more. "ignore": say nothing. The verdict's confidence counts other work either way.
    busy: str = "warn"
    # Seconds busy=wait waits for the machine to quiet down before one timed window, > 0.
    busy_wait_s: float = 60.0
    # Other work, in % of one core (100 = one core kept busy), above which the machine
    # counts as busy; > 0. 50: other processes keep half a core busy on average.
    busy_cpu_percent: float = 50.0


_TARGET = "hydra_plugins.loadertune_sweeper.loadertune_sweeper.LoadertuneSweeper"


def _sweeper_node() -> dict[str, Any]:
    """The node ``hydra/sweeper=loadertune`` selects: every setting with its default, untyped
    (Hydra would refuse a wrong type at composition, in several lines naming no fix), and how
    Hydra builds the sweeper. Sampler and pruner reach it as config nodes, not built objects
    (``_recursive_`` false): some samplers (grid, bruteforce) can only be built, or checked,
    once the search space is known."""
    settings = OmegaConf.to_container(OmegaConf.structured(SweepSettings))
    assert isinstance(settings, dict)
    node = {"defaults": list(defaults), "_target_": _TARGET, "_recursive_": False}
    return {**node, **{str(k): v for k, v in settings.items()}}


SWEEPER_NODE = _sweeper_node()


def _register() -> None:
    """Store every schema under its Hydra group, so YAML and overrides can select it."""
    store = ConfigStore.instance()
    store.store(group="hydra/sweeper", name="loadertune", node=SWEEPER_NODE, provider=_PROVIDER)
    for name, sampler in SAMPLER_CONFIGS.items():
        store.store(group="hydra/sweeper/sampler", name=name, node=sampler, provider=_PROVIDER)
    for name, pruner in PRUNER_CONFIGS.items():
        store.store(group="hydra/sweeper/pruner", name=name, node=pruner, provider=_PROVIDER)


_register()
