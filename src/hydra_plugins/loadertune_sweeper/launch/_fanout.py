"""Fan one study out over several hosts through a Hydra launcher (SLURM via submitit).

The sweeper runs each trial itself, in a forked process it watches, not through a launcher
(a launcher returns only when a job is over; the sweep must prune, time out and kill a trial
while it runs). Launchers are used one level up instead: with ``hydra/launcher=loadertune_slurm``
and ``hydra.sweeper.workers=K`` this process submits K jobs, each a whole node running this
same sweep, one trial at a time, against the shared study storage. The jobs derive the study
name on their nodes (from their machine class), so identical nodes meet in one study and stop
together once it holds ``n_trials`` (``count_trials=study``). This process waits for them and
sums up; each worker leaves its own sweep directory ``<sweep dir>/worker<k>/``.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TextIO

from hydra.core.hydra_config import HydraConfig
from hydra.core.plugins import Plugins
from hydra.core.utils import JobStatus
from omegaconf import DictConfig, OmegaConf, open_dict

from loadertune._hydra_private import BASIC_LAUNCHER as BASIC
from loadertune._hydra_private import job_error
from loadertune._lazy import optuna
from loadertune.errors import ConfigError, ExitStatus, status_of

from .._keys import Recommended, Results, TrialAttr
from ..config import SweepSettings
from ..engine._loop import SweepEngine
from ..record._mlflow_runs import results_yaml, write_results
from ..study import _storage

if TYPE_CHECKING:
    from hydra.types import HydraContext, TaskFunction

# Launchers that run every job on the machine that submits them.
SAME_HOST = ("submitit_launcher.LocalLauncher", "joblib_launcher.JoblibLauncher")
_KEY = "hydra.sweeper"


class ScaleOut(Protocol):
    """The ``hydra.sweeper`` settings this module reads (``config.SweepSettings`` has them)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]
    count_trials: str
    workers: int
    n_trials: int
    allow_parallel_trials: bool
    storage: str | None


def launcher_target(config: DictConfig) -> str:
    """The ``_target_`` of ``hydra.launcher`` (Hydra's basic launcher when unset)."""
    return str(OmegaConf.select(config, "hydra.launcher._target_", default=BASIC))


def wanted(settings: ScaleOut, config: DictConfig | None) -> bool:
    """Whether this sweep runs on other hosts (a launcher other than Hydra's basic one)."""
    return config is not None and launcher_target(config) != BASIC


def check_scale_out(s: ScaleOut, config: DictConfig | None) -> None:
    """Raise :class:`ConfigError` for scale-out settings that cannot work, naming the key."""
    _check_values(s)
    if s.workers == 1 or config is None:
        return
    target = launcher_target(config)
    _check_launcher(s, target)
    if not target.endswith(SAME_HOST):
        _check_shared_stores(s, config)


def _check_values(s: ScaleOut) -> None:
    """``count_trials`` and ``workers`` each make sense on their own."""
    if s.count_trials not in ("invocation", "study"):
        raise ConfigError(
            f"{_KEY}.count_trials",
            s.count_trials,
            "is not invocation or study",
            "count_trials=invocation: n_trials is what this command runs; count_trials=study: "
            "n_trials is the study's total, shared by every host that joins it",
        )
    if s.workers < 1:
        raise ConfigError(
            f"{_KEY}.workers", s.workers, "must be an integer >= 1", "e.g. hydra.sweeper.workers=4"
        )


def _check_launcher(s: ScaleOut, target: str) -> None:
    """Several workers need a shared trial count and a launcher that starts them at once."""
    if s.count_trials != "study":
        raise ConfigError(
            f"{_KEY}.workers",
            s.workers,
            f"with count_trials=invocation every worker would run n_trials ({s.n_trials}) "
            "trials of its own",
            "add hydra.sweeper.count_trials=study: the workers together run n_trials",
        )
    if target == BASIC:
        raise ConfigError(
            f"{_KEY}.workers",
            s.workers,
            "needs a launcher that starts the workers at once, each on its own host; Hydra's "
            "basic launcher would run them one after another",
            "add hydra/launcher=loadertune_slurm (SLURM), or hydra/launcher=submitit_local to "
            "try the fan-out on this host",
        )
    if target.endswith(SAME_HOST) and not s.allow_parallel_trials:
        raise ConfigError(
            f"{_KEY}.workers",
            s.workers,
            f"{target.rsplit('.', 1)[-1]} starts every worker on this host, and trials that "
            "run at the same time on one host disturb each other's timings",
            "use hydra/launcher=loadertune_slurm for separate nodes, or set "
            "hydra.sweeper.allow_parallel_trials=true to insist (tests, demos)",
        )


def _check_shared_stores(s: ScaleOut, config: DictConfig) -> None:
    """Workers on several hosts need an Optuna and an MLflow store they can all reach safely."""
    if s.storage is None or str(s.storage).startswith("sqlite"):
        raise ConfigError(
            f"{_KEY}.storage",
            s.storage,
            f"{s.workers} hosts would share one SQLite file, and SQLite's locking is not "
            "safe over a network file system",
            "use a database server: hydra.sweeper.storage=postgresql://user:password@host/db",
        )
    tracking = _tracking_uri(config)
    if tracking is not None and tracking.startswith("sqlite"):
        raise ConfigError(
            "tracking.tracking_uri",
            tracking,
            f"{s.workers} hosts would write one MLflow SQLite file",
            "start a tracking server (scripts/mlflow_server.sh) and set "
            "tracking.tracking_uri=http://<server>:5000, or tracking.enabled=false",
        )


def fan_out(
    s: ScaleOut,
    hydra_context: HydraContext | None,
    task_function: TaskFunction | None,
    sweep_config: DictConfig | None,
    arguments: list[str],
) -> None:
    """Submit ``workers`` sweep jobs through the configured launcher and wait for them."""
    assert sweep_config is not None and hydra_context is not None
    assert task_function is not None
    config = copy.deepcopy(sweep_config)
    # Resolve the sweep dir once, here: ${now:...} on each node would name K directories.
    sweep_dir = Path(str(sweep_config.hydra.sweep.dir)).expanduser().resolve()
    with open_dict(config):
        config.hydra.sweep.dir = str(sweep_dir)
    worker = SweepWorker(
        settings={**dataclasses.asdict(s), "workers": 1},
        arguments=list(arguments),
        hydra_context=hydra_context,
        task_function=task_function,
        config=config,
    )
    launcher = Plugins.instance().instantiate_launcher(
        hydra_context=hydra_context, task_function=worker, config=config
    )
    jobs = [[f"hydra.sweep.subdir=worker{k}"] for k in range(s.workers)]
    print(f"loadertune: {s.workers} sweep worker(s) through {launcher_target(config)}")
    print(f"loadertune: sweep dir {sweep_dir}")
    try:
        returns = launcher.launch(jobs, initial_job_idx=0)
    except Exception as exc:  # a job that died without a result (node failure, scancel)
        print(f"loadertune: error: a sweep worker job failed: {_first_line(exc)}", file=sys.stderr)
        sys.exit(status_of(exc, ExitStatus.INFRASTRUCTURE))
    summarise(returns, sweep_dir)


def summarise(returns: Any, sweep_dir: Path) -> None:
    """Print what each worker did and write the study's results into the top sweep dir."""
    failed: list[ExitStatus] = []
    studies: dict[tuple[str, str], dict[str, Any]] = {}
    for k, ret in enumerate(returns):
        if ret.status != JobStatus.COMPLETED:  # reading return_value would re-raise
            error = job_error(ret)
            failed.append(status_of(error, ExitStatus.INFRASTRUCTURE))
            print(f"worker{k}: FAILED: {_first_line(error)}", file=sys.stderr)
            continue
        info = ret.return_value
        verdicts = studies.setdefault((info["study_name"], info["storage"]), {})
        if info.get("recommended"):
            verdicts[f"worker{k}"] = info["recommended"]
        print(f"worker{k}: {info['host']} ran {info['trials']} trial(s) of {info['study_name']}")
    for (name, storage), verdicts in studies.items():
        study = optuna.load_study(study_name=name, storage=storage)
        recommended, line = joint_recommendation(verdicts)
        results = results_yaml(study, storage, recommended)
        if verdicts:
            results["recommended_by_worker"] = verdicts
        write_results(sweep_dir, results)
        best = results.get(Results.BEST_VALUE)
        print(
            f"study {name}: {len(study.trials)} trials; search's fastest "
            f"{'-' if best is None else f'{best:.4f} ms/sample'} "
            f"(#{results.get('best_trial_number')}) {results.get('best_params')}"
        )
        print(f"study {name}: {line}")
    if failed:  # the first failed worker's status (a worker's own sweep exits with its own)
        sys.exit(failed[0])


def joint_recommendation(verdicts: dict[str, dict[str, Any]]) -> tuple[dict[str, Any] | None, str]:
    """The join's ``recommended:`` block from the workers' own verdicts, and a line saying it.

    Each worker gives its verdict on its own node. When every verdict picked the same loader
    settings, that is the recommendation (with the first worker's figures and who agreed);
    when they differ, there is none: which one holds is for one verdict, run once on one node
    over the whole study, to say (``docs/scale-out.md``).
    """
    if not verdicts:
        return None, (
            "no verdict ran (hydra.sweeper.verdict_repeats=0 on the workers); run the same "
            "command once on one node with the verdict on to get a recommendation"
        )
    settings = {name: block.get(Recommended.LOADER) for name, block in verdicts.items()}
    block = next(iter(verdicts.values()))
    if all(loader == block.get(Recommended.LOADER) for loader in settings.values()):
        joint = {**block, Recommended.AGREED_BY: list(verdicts)}
        return (
            joint,
            f"recommended by {len(verdicts)} worker verdict(s) alike: {block[Recommended.LOADER]}",
        )
    said = "; ".join(f"{name} {loader}" for name, loader in settings.items())
    return None, (
        f"the workers' verdicts differ ({said}): run the same command once on one node with "
        "the verdict on to settle it over the whole study"
    )


@dataclasses.dataclass
class SweepWorker:
    """The job each launcher runs on its node: this sweep, with this node's trials.

    Picklable (submitit sends it to the node); ``__call__`` runs there, under Hydra's
    ``run_job``, whose job directory becomes this worker's sweep directory.
    """

    settings: dict[str, Any]
    arguments: list[str]
    hydra_context: HydraContext
    task_function: TaskFunction
    config: DictConfig

    def __call__(self, job_cfg: DictConfig) -> dict[str, Any]:
        job_dir = str(HydraConfig.get().runtime.output_dir)
        config = copy.deepcopy(self.config)
        with open_dict(config):
            config.hydra.sweep.dir = job_dir
            config.hydra.launcher = {"_target_": BASIC}  # trials run here, on this node
        engine = SweepEngine(
            SweepSettings(**self.settings), self.hydra_context, self.task_function, config
        )
        tee = _LastLine(sys.stderr)
        sys.stderr = tee
        try:
            engine.sweep(self.arguments)
        except SystemExit as exc:
            if exc.code:
                raise RuntimeError(
                    f"the sweep on {socket.gethostname()} stopped (status {exc.code}): "
                    f"{tee.last or 'see its log'}"
                ) from None
        finally:
            sys.stderr = tee.stream
        return _report(Path(job_dir), engine.results)


def _report(job_dir: Path, results: dict[str, Any]) -> dict[str, Any]:
    """What this worker did: host, study and the trials it ran (``results``: the sweep's
    ``optimization_results.yaml``, as its engine wrote it)."""
    study = optuna.load_study(
        study_name=results[Results.STUDY_NAME], storage=results[Results.STORAGE]
    )
    host, pid = socket.gethostname(), os.getpid()
    mine = [
        t
        for t in study.get_trials(deepcopy=False)
        if t.user_attrs.get(TrialAttr.OWNER_HOST) == host
        and t.user_attrs.get(TrialAttr.OWNER_PID) == pid
        and t.user_attrs.get(TrialAttr.REASON) != _storage.OVER_BUDGET
    ]
    return {
        "host": host,
        "pid": pid,
        "study_name": results[Results.STUDY_NAME],
        "storage": results[Results.STORAGE],
        "trials": len(mine),
        "sweep_dir": str(job_dir),
        "recommended": results.get(Results.RECOMMENDED),
    }


def _tracking_uri(config: DictConfig) -> str | None:
    """The MLflow store the workers would write, as ``loadertune.record._tracking`` picks it."""
    if not OmegaConf.select(config, "tracking.enabled", default=True):
        return None
    uri = OmegaConf.select(config, "tracking.tracking_uri", default=None)
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI")
    return str(uri) if uri else "sqlite:///<paths.output_root>/mlflow.db"


def _first_line(exc: Any) -> str:
    """One line of an error: the last line of a traceback, else the first line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return repr(exc)
    return lines[-1] if "Traceback" in lines[0] else lines[0]


class _LastLine(io.TextIOBase):
    """Passes writes through to ``stream`` and keeps the last non-empty line (the error)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.last = ""

    def write(self, text: str) -> int:
        lines = [line for line in text.splitlines() if line.strip()]
        if lines:
            self.last = lines[-1].strip()
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()
