"""Translate Hydra's sweep grammar into Optuna distributions.

The grammar is the official Optuna sweeper's: ``choice(...)``, ``range(...)``,
``interval(...)``, ``int(interval(...))`` and ``tag(log, ...)``, written either under
``hydra.sweeper.params`` or on the command line. The mapping is ported to Optuna >= 4
distributions (``IntDistribution``, ``FloatDistribution``, ``CategoricalDistribution``) and
fixes two things the official plugin got wrong:

* Hydra's ``range`` stop is exclusive while Optuna's ``high`` is inclusive, so ``high`` is
  the last value the range really yields: ``range(0, 8, 2)`` is 0, 2, 4, 6, never 8.
* Float ranges are computed in decimal from the numbers as written, so ``range(0, 1, 0.3)``
  ends at 0.9, not at 0.8999999999999999 (which Optuna would shrink, with a warning, to
  0.6), and ``range(0.1, 0.4, 0.1)`` stops at 0.3, where Hydra's own float iteration
  wrongly yields the excluded stop 0.4 as well.

Decisions, so that a stored study can be resumed and samplers model what the user meant:

* ``choice(...)`` is always categorical, even when every choice is an integer: the values
  may be unevenly spaced (``choice(16, 64, 256)``) and a choice names a set, not a scale.
  Use ``range(...)``, ``int(interval(...))`` or ``tag(log, int(interval(...)))`` for an
  ordered integer axis that TPE, GP and CMA-ES can exploit.
* ``shuffle(...)`` is categorical in the written order. Shuffling only changes the order of
  Hydra's basic sweeper; Optuna refuses to resume a study whose categorical choices come in
  a different order, so a random order would break resuming.
* Float ranges become a stepped ``FloatDistribution`` (ordered, as in the official plugin),
  not a categorical of their values.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Mapping, Sequence
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import (
    ChoiceSweep,
    IntervalSweep,
    Override,
    RangeSweep,
    Transformer,
)
from hydra.errors import HydraException
from optuna.distributions import (
    BaseDistribution,
    CategoricalChoiceType,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from loadertune.config import check_finite

__all__ = [
    "continuous_keys",
    "distribution_from_override",
    "grid_search_space",
    "parse_params",
]

_SUPPORTED_TAGS = frozenset({"log"})
_SUPPORTED = "choice(...), range(...), interval(...), int(interval(...)) or tag(log, ...)"


def distribution_from_override(override: Override) -> BaseDistribution:
    """Return the Optuna distribution a sweep override describes.

    Args:
        override: One parsed override whose value is a sweep, e.g. ``lr=interval(0, 1)``.

    Returns:
        ``CategoricalDistribution`` for ``choice`` and ``shuffle``; ``IntDistribution`` for
        integer ``range`` and ``int(interval)``; ``FloatDistribution`` for float ``range``
        (with a step) and ``interval``. ``tag(log, ...)`` sets ``log=True``.

    Raises:
        ValueError: naming the key, when the override is a plain value (those are fixed
            values, see ``parse_params``), uses grammar Optuna cannot sample (``glob``,
            unknown tags), or describes an empty or invalid range.
    """
    key = override.get_key_element()
    if not override.is_sweep_override():
        raise ValueError(
            f"{key}={override.get_value_element_as_str()} is a fixed value, not a sweep; "
            f"sweep it with {_SUPPORTED}."
        )
    sweep = override.value()
    _check_finite_numbers(key, sweep)
    try:
        if isinstance(sweep, ChoiceSweep):
            return _from_choice(sweep)
        if isinstance(sweep, RangeSweep):
            return _from_range(sweep)
        if isinstance(sweep, IntervalSweep):
            return _from_interval(sweep)
    except ValueError as exc:
        raise ValueError(f"{key}={_value_text(override)}: {exc}") from exc
    raise ValueError(
        f"{key}={_value_text(override)}: this sweep is not supported by the loadertune "
        f"sweeper; use {_SUPPORTED} (for config groups, list the options with choice(...))."
    )


def parse_params(
    params: Mapping[str, str] | None, overrides: Sequence[str]
) -> tuple[dict[str, BaseDistribution], dict[str, Any]]:
    """Split ``hydra.sweeper.params`` and command-line overrides into search space and fixed.

    ``params`` are read first, then ``overrides``; a later entry for the same config key
    replaces an earlier one (``+key`` and ``key`` count as the same key), so the command line
    wins over the config file, whether it sweeps the key or fixes it.

    Args:
        params: ``hydra.sweeper.params``: config key to sweep expression or plain value.
        overrides: Command-line overrides the sweeper received, e.g. ``["lr=interval(0,1)"]``.

    Returns:
        ``(search_space, fixed)``. ``search_space`` maps each swept key (with its ``+``/``++``
        prefix, as it must be written back as an override) to its distribution. ``fixed``
        maps each plain key to its value text, ready to render as ``key=value`` so that Hydra
        parses it back to the same value (``'5'`` stays a string, ``[1,2]`` a list).

    Raises:
        ValueError: naming the key, for an override Hydra cannot parse, a deletion
            (``~key``), or a sweep ``distribution_from_override`` refuses.
    """
    lines = [f"{key}={value}" for key, value in (params or {}).items()]
    lines.extend(overrides)
    parser = OverridesParser.create()
    search_space: dict[str, BaseDistribution] = {}
    fixed: dict[str, Any] = {}
    written_as: dict[str, str] = {}  # config key -> key as written, prefix included
    for line in lines:
        override = _parse(parser, line)
        key = override.get_key_element()
        if override.is_delete():
            raise ValueError(
                f"{key}: deleting a key is not supported in a loadertune sweep; remove "
                f"{override.key_or_group} from the config instead."
            )
        previous = written_as.pop(_config_key(override), None)
        if previous is not None:
            search_space.pop(previous, None)
            fixed.pop(previous, None)
        written_as[_config_key(override)] = key
        if override.is_sweep_override():
            search_space[key] = distribution_from_override(override)
        else:
            fixed[key] = override.get_value_element_as_str()
    return search_space, fixed


def grid_search_space(space: Mapping[str, BaseDistribution]) -> dict[str, list[Any]]:
    """Return the values per key that Optuna's ``GridSampler`` needs for ``space``.

    Args:
        space: Search space from ``parse_params``.

    Returns:
        Categorical choices as written; every value of an integer distribution, step
        respected; every step of a stepped float distribution, computed in decimal so each
        value lies exactly on the distribution's grid.

    Raises:
        ValueError: naming the first key whose distribution is continuous (a float without
            step), which has no finite list of values.
    """
    continuous = continuous_keys(space)
    if continuous:
        raise ValueError(
            f"{continuous[0]}: the grid sampler needs a finite set of values, but "
            f"{space[continuous[0]]} is continuous; sweep {continuous[0]} with choice(...) "
            "or range(...) to use the grid sampler."
        )
    return {key: _finite_values(distribution) for key, distribution in space.items()}


def continuous_keys(space: Mapping[str, BaseDistribution]) -> list[str]:
    """Return the keys of ``space`` with infinitely many values (floats without a step).

    Grid and brute-force search can only enumerate the other keys.
    """
    return [
        key
        for key, distribution in space.items()
        if isinstance(distribution, FloatDistribution) and distribution.step is None
    ]


def _parse(parser: OverridesParser, line: str) -> Override:
    """Parse one override, turning Hydra's parse error into a ValueError naming the key."""
    try:
        return parser.parse_overrides([line])[0]
    except HydraException as exc:
        key = line.split("=", 1)[0].strip()
        raise ValueError(f"{key}: cannot parse the override '{line}': {exc}") from exc


def _config_key(override: Override) -> str:
    """Return the key an override sets, without the ``+``/``++``/``~`` prefix."""
    if override.package is None:
        return override.key_or_group
    return f"{override.key_or_group}@{override.package}"


def _value_text(override: Override) -> str:
    """Return the override's value as written, for error messages."""
    if override.input_line and "=" in override.input_line:
        return override.input_line.split("=", 1)[1]
    return str(override.value())


def _check_tags(tags: set[str], *, log_allowed: bool = True) -> bool:
    """Return whether ``tag(log, ...)`` was given; refuse tags this sweeper does not know."""
    unknown = sorted(tags - _SUPPORTED_TAGS)
    if unknown:
        raise ValueError(f"unknown tag(s) {unknown}; the only supported tag is 'log'.")
    if "log" in tags and not log_allowed:
        raise ValueError(
            "tag(log, ...) applies to interval(...) and range(...) only, not to a categorical "
            "choice(...) or shuffle(...)."
        )
    return "log" in tags


def _check_finite_numbers(key: str, sweep: Any) -> None:
    """Refuse ``nan``, ``inf`` or ``-inf`` among a sweep's values or bounds, as every schema
    refuses them for a fixed value (:func:`loadertune.config.check_finite`)."""
    if isinstance(sweep, ChoiceSweep):
        numbers = list(sweep.list)
    elif isinstance(sweep, RangeSweep):
        numbers = [sweep.start, sweep.stop, sweep.step]
    elif isinstance(sweep, IntervalSweep):
        numbers = [sweep.start, sweep.end]
    else:
        numbers = []
    for number in numbers:
        check_finite(key.lstrip("+"), number, f"conf/{key.lstrip('+').split('.')[0]}/")


def _from_choice(sweep: ChoiceSweep) -> CategoricalDistribution:
    """Categorical in the written order (see the module notes on ``shuffle``)."""
    _check_tags(sweep.tags, log_allowed=False)
    choices: list[CategoricalChoiceType] = []
    for element in sweep.list:
        # Lists and dicts become their override text, which Hydra parses back unchanged.
        value = Transformer.encode(element)
        assert isinstance(value, (str, int, float, bool)), value
        choices.append(value)
    return CategoricalDistribution(choices)


def _from_range(sweep: RangeSweep) -> BaseDistribution:
    """Integer or stepped float distribution over exactly the values the range yields."""
    log = _check_tags(sweep.tags, log_allowed=not sweep.shuffle)
    assert sweep.start is not None and sweep.stop is not None
    if sweep.step == 0:
        raise ValueError("the step of range(...) must not be 0.")
    integer = all(isinstance(v, int) for v in (sweep.start, sweep.stop, sweep.step))
    if integer:
        values: list[Any] = list(range(int(sweep.start), int(sweep.stop), int(sweep.step)))
    else:
        values = _float_range(sweep.start, sweep.stop, sweep.step)
    if not values:
        raise ValueError(
            f"range({sweep.start}, {sweep.stop}, step={sweep.step}) yields no values "
            "(the stop is exclusive); check the bounds and the sign of the step."
        )
    if sweep.shuffle:
        return CategoricalDistribution(values)
    if integer:
        return IntDistribution(min(values), max(values), log=log, step=abs(int(sweep.step)))
    return FloatDistribution(min(values), max(values), log=log, step=abs(float(sweep.step)))


def _float_range(start: float, stop: float, step: float) -> list[float]:
    """Values of a float range, stop excluded, computed from the decimals as written.

    Hydra's own iteration accumulates rounding errors: it yields 0.30000000000000004 in
    ``range(0.1, 0.5, 0.1)`` and even the excluded stop 0.4 in ``range(0.1, 0.4, 0.1)``.
    """
    first, end, delta = (decimal.Decimal(repr(float(x))) for x in (start, stop, step))
    count = max(0, math.ceil((end - first) / delta))
    return [float(first + i * delta) for i in range(count)]


def _from_interval(sweep: IntervalSweep) -> BaseDistribution:
    """``int(interval)`` is integer, any other interval is float; both ends included."""
    log = _check_tags(sweep.tags)
    assert sweep.start is not None and sweep.end is not None
    if isinstance(sweep.start, int) and isinstance(sweep.end, int):
        return IntDistribution(sweep.start, sweep.end, log=log)
    return FloatDistribution(float(sweep.start), float(sweep.end), log=log)


def _finite_values(distribution: BaseDistribution) -> list[Any]:
    """Enumerate a distribution known to be finite."""
    if isinstance(distribution, CategoricalDistribution):
        return list(distribution.choices)
    if isinstance(distribution, IntDistribution):
        return list(range(distribution.low, distribution.high + 1, distribution.step))
    if isinstance(distribution, FloatDistribution) and distribution.step is not None:
        low = decimal.Decimal(repr(distribution.low))
        step = decimal.Decimal(repr(distribution.step))
        steps = ((decimal.Decimal(repr(distribution.high)) - low) / step).to_integral_value()
        return [float(low + i * step) for i in range(int(steps) + 1)]
    raise ValueError(f"{distribution} has no finite set of values.")
