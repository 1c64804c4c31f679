"""The ``loadertune`` command: a Hydra app over ``conf/`` around :func:`loadertune.run_trial`.

Hydra glue only: compose, convert to typed config once, run, record, report, and return the
objective (time per sample in ms) for a sweeper.
"""

from __future__ import annotations

import difflib
import re
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import hydra
from hydra.errors import MissingConfigException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError

from loadertune._hydra_private import composition_errors
from loadertune._lazy import elastic_api
from loadertune.checks import HostBusy, register_resolvers, timing_lock, validate
from loadertune.config import to_run_config
from loadertune.errors import ConfigError, ExitStatus, status_of
from loadertune.guards import end
from loadertune.loader import check_loader_choice, output_root_of
from loadertune.measure import too_short
from loadertune.record import (
    REASONS,
    USER_BUGS,
    InfeasibleSetting,
    MessageKind,
    RankRaised,
    Reason,
    StoreUnavailable,
    TrialFailure,
    artifact_root,
    check_tracking_server,
    check_writable,
    classify,
    error_signature,
    failed_status,
    log_trial,
    mlflow_run,
    print_summary,
    step_progress,
    tracking_uri,
    ui_hint,
)
from loadertune.record import _channel as channel
from loadertune.trial import run_trial

if TYPE_CHECKING:
    from loadertune.config import RunConfig
    from loadertune.record import TrialResult

register_resolvers()


def run_from_hydra(cfg: DictConfig) -> float:
    """Run one trial from a composed config, record it, and return its objective.

    Under the loadertune sweeper the trial streams to the sweep process instead, which
    records it (see :mod:`loadertune.record._channel`). On its own, anything that stops it ends in
    one line and an exit status (:mod:`loadertune.errors`).
    """

    link = channel.current()
    if link is not None:
        config = to_run_config(cfg)
        result = run_trial(config, on_step=lambda r, t: link.send(MessageKind.STEP, (r, t)))
        _refuse_short_window(config, result)
        link.send(MessageKind.RESULT, result)
        return result.objective
    config, result = _measure_here(cfg)
    print_summary(config, result)
    if config.tracking.enabled:
        resolved = OmegaConf.to_yaml(cfg, resolve=True)
        out = config.paths.output_root
        with mlflow_run(config.tracking, out) as run:
            log_trial(run.info.run_id, config, result, resolved)
        print(f"MLflow run {run.info.run_id} in experiment '{config.tracking.experiment}'")
        uri = tracking_uri(config.tracking, out)
        artifacts = artifact_root(config.tracking, out)
        for line in ui_hint(uri, run.info.experiment_id, run.info.run_id, artifacts):
            print(line)
    return result.objective


def _measure_here(cfg: DictConfig) -> tuple[RunConfig, TrialResult]:
    """Check, take the host's timing lock, run the trial; one line and its status if not."""

    try:
        config = to_run_config(cfg)
        validate(config)
        _check_stores(config)
        with timing_lock("a trial", config.trial.host_lock), step_progress(config) as on_step:
            result = run_trial(config, on_step=on_step)
        _refuse_short_window(config, result)
        return config, result
    except (ConfigError, InfeasibleSetting, HostBusy, StoreUnavailable) as exc:
        print(f"loadertune: error: {exc}", file=sys.stderr)
        sys.exit(status_of(exc))
    except TrialFailure as exc:  # a guard stopped it, or a rank failed: its text, one line
        _report_failure(exc)
    except KeyboardInterrupt as exc:
        print("loadertune: interrupted: the trial stopped before its figure", file=sys.stderr)
        sys.exit(status_of(exc))
    except Exception as exc:  # the dataset (or a worker) raised: the user's frames, one line
        _report_raised(exc)


def _report_raised(exc: Exception) -> NoReturn:
    """A trial that raised: its traceback without loadertune's and Hydra's frames, then one
    line with the reason (:func:`loadertune.record._failures.classify`), where and the fix."""

    text = "".join(traceback.format_exception(exc))
    reason = classify(type(exc).__name__, text)
    shown = traceback.TracebackException.from_exception(exc)
    if reason != Reason.INTERNAL_ERROR:  # loadertune's own bug: its frames are the report
        shown.stack = traceback.StackSummary.from_list(
            [f for f in shown.stack if not _ours(f.filename)]
        )
    print("".join(shown.format()).rstrip(), file=sys.stderr)
    print(f"loadertune: error: trial failed ({reason}): {_placed(text, reason)}", file=sys.stderr)
    sys.exit(failed_status(reason))


def _report_failure(exc: TrialFailure) -> NoReturn:
    """A trial a guard stopped or a rank failed: its text, in one line; a rank that raised as
    a trial of one rank that raised (:func:`_report_raised`): the rank's traceback without
    loadertune's, Hydra's and the launcher's frames, then one line naming the rank."""
    first, *printed = exc.message.splitlines()
    if exc.reason == Reason.INTERNAL_ERROR and exc.__cause__ is not None:
        traceback.print_exception(exc.__cause__, file=sys.stderr)  # for the report
    if isinstance(exc, RankRaised) and exc.trace:
        keep = exc.reason == Reason.INTERNAL_ERROR  # loadertune's own bug: its frames too
        print(exc.trace if keep else _user_frames(exc.trace), file=sys.stderr)
        first = f"{exc.who} raised {_placed(exc.trace, exc.reason)}"
    elif printed:
        print("\n".join(printed), file=sys.stderr)
    print(f"loadertune: error: trial failed ({exc.reason}): {first}", file=sys.stderr)
    sys.exit(status_of(exc))


def _placed(text: str, reason: Reason) -> str:
    """The error of traceback ``text`` at its innermost place, its message and the fix."""
    last = text.strip().splitlines()[-1]  # a worker's original error is the innermost
    said = last.partition(": ")[2] or last
    if reason in USER_BUGS:
        fix = "a bug in the user's code, whatever the loader settings: fix it and run again"
    elif reason == Reason.INTERNAL_ERROR:
        fix = (
            "a bug in loadertune, not in the dataset or the step: please report it with "
            "the traceback above"
        )
    else:
        fix = REASONS[reason]
    return f"{error_signature(text)}: {said}; {fix}"


def _ours(filename: str) -> bool:
    """A frame of loadertune, Hydra or PyTorch's launcher, which the user's traceback leaves
    out."""
    homes = (Path(__file__).parent, Path(hydra.__file__).parent, _launcher_home())
    return any(Path(filename).is_relative_to(home) for home in homes)


def _launcher_home() -> Path:
    """PyTorch's elastic launcher's package (``torch/distributed/elastic``)."""
    return Path(elastic_api.__file__).parent.parent


_FRAME_LINE = re.compile(r'^  File "(?P<file>[^"]+)", line \d+')


def _user_frames(trace: str) -> str:
    """A formatted traceback without the frames :func:`_ours` names (each frame's line and
    the source lines indented under it)."""
    kept, skipping = [], False
    for line in trace.splitlines():
        if m := _FRAME_LINE.match(line):
            skipping = _ours(m["file"])
        elif not line.startswith("    "):
            skipping = False  # a header, or the error's own lines
        if not skipping:
            kept.append(line)
    return "\n".join(kept)


def _refuse_short_window(config: RunConfig, result: TrialResult) -> None:
    """A window the time limit cut below the steps a rate needs is a failed trial, not a
    figure (:func:`loadertune.measure._precision.too_short`)."""

    why = too_short(len(result.steps), config.trial.time_limit_s) if result.truncated else None
    if why:
        raise TrialFailure(Reason.TIMEOUT, why)


def _check_stores(config: RunConfig) -> None:
    """The output root writable, the tracking server answering: before the trial runs."""
    check_writable(config.paths.output_root)
    if config.tracking.enabled:
        check_tracking_server(tracking_uri(config.tracking, config.paths.output_root))


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def _hydra_main(cfg: DictConfig) -> float:
    return run_from_hydra(cfg)


def sweeper_shortcuts(argv: list[str]) -> list[str]:
    """Rewrite two command-line forms users bring from the YAML into what Hydra accepts.

    ``hydra.sweeper.sampler=grid`` (and ``pruner``) selects the config group option, as
    ``hydra/sweeper/sampler=grid`` does, keeping the option's defaults. In a multirun,
    ``hydra.sweeper.params.<key>=<sweep>`` becomes ``<key>=<sweep>``. In YAML,
    ``hydra.sweeper.params`` maps dotted config keys to sweep expressions; on the command
    line Hydra would read the dots as nesting and refuse a sweep over its own config
    ("Sweeping over Hydra's configuration is not supported"), so the argument is handed to
    the sweeper as the equivalent sweep override, which wins over ``params`` as it would.
    """
    multirun = bool({"-m", "--multirun"} & set(argv))
    out = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if key in _GROUPS and value.isidentifier():
            out.append(f"{_GROUPS[key]}={value}")
            continue
        if not multirun:
            out.append(arg)
            continue
        prefix = key[: len(key) - len(key.lstrip("+"))]
        plain = key.lstrip("+")
        if sep and plain.startswith(_PARAMS) and len(plain) > len(_PARAMS):
            arg = f"{prefix}{plain[len(_PARAMS) :]}={value}"
        out.append(arg)
    return out


_PARAMS = "hydra.sweeper.params."
_GROUPS = {
    "hydra.sweeper.sampler": "hydra/sweeper/sampler",
    "hydra.sweeper.pruner": "hydra/sweeper/pruner",
}


def main() -> NoReturn:
    """Console-script entry point: the output root checked first, since Hydra writes there
    before anything else runs (a read-only or full disk: one line, exit status 5); the end
    without Python's module teardown (:mod:`loadertune.guards._process_end`)."""

    sys.argv = sweeper_shortcuts(sys.argv)
    check_loader_option(sys.argv[1:])
    if not {"--help", "-h", "--cfg", "-c", "--info", "--shell-completion"} & set(sys.argv):
        try:
            check_writable(output_root_of(sys.argv[1:]))
        except StoreUnavailable as exc:
            print(f"loadertune: error: {exc}", file=sys.stderr)
            sys.exit(status_of(exc))

    try:
        with composition_errors(_refuse_override):
            _hydra_main()
    except SystemExit as done:  # Hydra's errors and the sweep's exit statuses
        end(done.code)
    end(0)  # every record is written: no module teardown (loadertune.guards._process_end)


def _refuse_override(exc: Exception) -> NoReturn:
    """An override Hydra cannot apply: one line naming it and the fix, exit status 2."""

    print(f"loadertune: error: {override_problem(exc)}", file=sys.stderr)
    sys.exit(ExitStatus.BAD_INPUT)


def override_problem(exc: Exception) -> str:
    """What is wrong with an override Hydra refused, and the fix, in one line.

    A key the config lacks (``loader.num_workrs=1``) gets the nearest key it has; a group
    option that does not exist (``dataset=bogus``) the options there are; anything else
    Hydra's own words, on one line.
    """

    cause = exc.__cause__
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    missing = (ConfigAttributeError, ConfigKeyError)
    if isinstance(cause, missing) and cause.full_key and cause.key is not None:
        full, key = str(cause.full_key), str(cause.key)
        value = next((line.split("=", 1)[1] for line in lines if f"+{full}=" in line), "...")
        parent = cause.parent_node
        keys = [str(k) for k in parent] if parent is not None else []
        near = difflib.get_close_matches(key, keys, n=1)
        where = full[: -len(key)]
        known = ", ".join(f"{where}{k}" for k in keys)
        fix = f"did you mean {where}{near[0]}={value}?" if near else f"use one of {known}"
        if full.startswith(("dataset.", "model.")):  # a custom target's own arguments
            fix += f" (an argument of your own dataset or model takes a +: +{full}={value})"
        return f"{full}={value}: is not a key of the config. Fix: {fix}"
    if isinstance(exc, MissingConfigException) and exc.options and exc.missing_cfg_file:
        group, _, option = exc.missing_cfg_file.rpartition("/")
        return (
            f"{group}={option}: is not an option of {group}. Fix: use one of "
            f"{', '.join(exc.options)}"
        )
    return "; ".join(line for line in lines if not line.startswith("Config search path"))


def check_loader_option(argv: list[str]) -> None:
    """``loader=<exported option>`` that is missing or broken: one line, exit status 2, before
    Hydra composes (:func:`loadertune.loader._exported.check_loader_choice`)."""

    try:
        check_loader_choice(argv)
    except ConfigError as exc:
        print(f"loadertune: error: {exc}", file=sys.stderr)
        sys.exit(ExitStatus.BAD_INPUT)
