"""A config node merged into its dataclass schema, or one line naming the key and the fix.

OmegaConf's own errors are multi-line and say nothing of the fix; each kind (a missing value,
a key the schema lacks, a value of the wrong type) is turned here into a :class:`ConfigError`
that names the full key, the value, and what to write instead. A number that is not finite
(``nan``, ``inf``, ``-inf``) is refused here too, for every numeric key of every schema: no
later bound check can catch ``nan``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import (
    ConfigKeyError,
    MissingMandatoryValue,
    OmegaConfBaseException,
)

from loadertune.errors import ConfigError


def structured(key: str, schema: type[Any], node: Any, comments: str | None = None) -> Any:
    """Merge ``node`` into ``schema`` and return the dataclass, naming the key on failure.

    ``comments`` says where the keys are documented (default: ``conf/<key>/``).
    """
    try:
        merged = OmegaConf.merge(_template(schema), node)  # type: ignore[arg-type]
        typed = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        sub = getattr(exc, "full_key", None) or ""
        full = f"{key}.{sub}" if sub else key
        problem = str(exc).splitlines()[0].rstrip(".")
        value = getattr(exc, "value", None)
        if isinstance(exc, MissingMandatoryValue):
            return_fix = f"set it, e.g. {full}=<value>"
            problem = "is required"
            value = "???"
        elif isinstance(exc, ConfigKeyError):  # a key the schema lacks
            known = ", ".join(f.name for f in dataclasses.fields(schema))
            return_fix = f"remove it or use one of the known keys: {known}"
            problem = "is not a known key"
        else:
            problem, return_fix = _wrong_type(
                schema, sub, problem, full, comments or f"conf/{key}/"
            )
        if sub and value is None:
            value = _value_at(node, sub)
        raise ConfigError(full, value, problem, return_fix) from None
    check_finite(key, typed, comments or f"conf/{key}/")
    return typed


def check_finite(key: str, value: Any, where: str) -> None:
    """Refuse ``nan``, ``inf`` and ``-inf`` anywhere in ``value`` (a dataclass, a mapping, a
    list, a number), naming the full key: every bound check (``> 0``, ``<= 1``) is False for
    ``nan``, so one would pass them all, and an infinite limit is no limit.

    Raises:
        ConfigError: naming ``key`` and its sub-key, with the fix.
    """
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(
            key, value, "is not a finite number",
            f"give {key} a finite number (its range is in the comments in {where})",
        )  # fmt: skip
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            check_finite(f"{key}.{f.name}", getattr(value, f.name), where)
    elif isinstance(value, Mapping):
        for name, item in value.items():
            check_finite(f"{key}.{name}", item, where)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            check_finite(f"{key}[{index}]", item, where)


def _value_at(node: Any, sub: str) -> Any:
    """The value at dotted ``sub`` in ``node``, a ``DictConfig`` or a plain mapping (a file
    read with ``yaml``): OmegaConf's error leaves it out for a key the schema lacks."""
    if isinstance(node, DictConfig):
        return OmegaConf.select(node, sub, throw_on_missing=False)
    for part in sub.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


@functools.cache
def _template(schema: type[Any]) -> DictConfig:
    """``schema`` as a structured config, built once: building it took a third of a trial's
    config conversion, and ``OmegaConf.merge`` copies its first config, never changing it."""
    template = OmegaConf.structured(schema)
    assert isinstance(template, DictConfig)
    return template


def _wrong_type(
    schema: type[Any], sub: str, problem: str, full: str, where: str
) -> tuple[str, str]:
    """The problem and the fix for a value OmegaConf could not convert to its field's type."""
    kinds = {f.name: f.type for f in dataclasses.fields(schema)}
    kind = _type_name(kinds.get(sub.split(".")[0]))
    if problem.startswith("Incompatible value 'None'"):
        problem = "cannot be null"
    elif " could not be converted" in problem:
        problem = problem.split(" could not be converted")[0].replace("Value ", "value ")
        problem += f" is not of type {kind}"
    else:  # e.g. "Value 'x' is not a valid bool (type str)"
        problem = problem.replace("Value ", "value ")
    return problem, f"give {full} a value of type {kind} (see the comments in {where})"


def _type_name(kind: Any) -> str:
    """A field's type as a person writes it, without ``| None``: ``int``, ``dict[str, str]``."""
    if kind is None:
        return "the documented type"
    name = kind.__name__ if isinstance(kind, type) else str(kind)
    return name.replace(" | None", "")
