"""A config node merged into its dataclass schema, or one line naming the key and the fix.

OmegaConf's own errors are multi-line and say nothing of the fix; each kind (a missing value,
a key the schema lacks, a value of the wrong type) is turned here into a :class:`ConfigError`
that names the full key, the value, and what to write instead.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    MissingMandatoryValue,
    OmegaConfBaseException,
)

from loadertune.errors import ConfigError


def structured(key: str, schema: type[Any], node: Any) -> Any:
    """Merge ``node`` into ``schema`` and return the dataclass, naming the key on failure."""
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), node)
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        sub = getattr(exc, "full_key", None) or ""
        full = f"{key}.{sub}" if sub else key
        problem = str(exc).splitlines()[0].rstrip(".")
        value = getattr(exc, "value", None)
        if isinstance(exc, MissingMandatoryValue):
            return_fix = f"set it, e.g. {full}=<value>"
            problem = "is required"
            value = "???"
        elif isinstance(exc, ConfigKeyError | ConfigAttributeError):  # a key the schema lacks
            known = ", ".join(f.name for f in dataclasses.fields(schema))
            return_fix = f"remove it or use one of the known keys: {known}"
            problem = "is not a known key"
        else:
            kinds = {f.name: f.type for f in dataclasses.fields(schema)}
            kind = str(kinds.get(sub.split(".")[0], "the documented type")).replace(" | None", "")
            problem = problem.split(" could not be converted")[0].replace("Value ", "value ")
            problem += f" is not of type {kind}"
            return_fix = f"give {full} a value of type {kind} (see the comments in conf/{key}/)"
        if isinstance(node, DictConfig) and sub and value is None:
            value = OmegaConf.select(node, sub, throw_on_missing=False)
        raise ConfigError(full, value, problem, return_fix) from None
