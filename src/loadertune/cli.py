"""The ``loadertune`` command: a Hydra app over ``conf/`` around :func:`loadertune.run_trial`.

Hydra glue only: compose, convert to typed config once, run, record, report, and return the
objective (time per sample in ms) for a sweeper.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig, OmegaConf

from loadertune import resolvers
from loadertune.errors import ConfigError

resolvers.register()


def run_from_hydra(cfg: DictConfig) -> float:
    """Run one trial from a composed config; bad input exits with one line and status 2.

    Under the loadertune sweeper the trial streams to the sweep process instead, which
    records it (see :mod:`loadertune.channel`).
    """
    from loadertune import channel
    from loadertune.config import to_run_config
    from loadertune.report import print_summary, step_progress
    from loadertune.trial import run_trial
    from loadertune.validation import validate

    link = channel.current()
    if link is not None:
        result = run_trial(to_run_config(cfg), on_step=lambda r, t: link.send("step", (r, t)))
        link.send("result", result)
        return result.objective
    try:
        config = to_run_config(cfg)
        validate(config)
        with step_progress(config) as on_step:
            result = run_trial(config, on_step=on_step)
    except ConfigError as exc:
        print(f"loadertune: error: {exc}", file=sys.stderr)
        sys.exit(2)
    print_summary(config, result)
    if config.tracking.enabled:
        from loadertune.tracking import log_trial, mlflow_run

        resolved = OmegaConf.to_yaml(cfg, resolve=True)
        with mlflow_run(config.tracking, config.paths.output_root) as run:
            log_trial(run.info.run_id, config, result, resolved)
        print(f"MLflow run {run.info.run_id} in experiment '{config.tracking.experiment}'")
    return result.objective


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def _hydra_main(cfg: DictConfig) -> float:
    return run_from_hydra(cfg)


def main() -> None:
    """Console-script entry point."""
    _hydra_main()
