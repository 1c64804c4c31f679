"""The decision rules a sweep's verdict and AutoLoader share, on plain measurements.

Three rooms, each fed plain numbers so either caller adapts its own measurements to them:
``_guess`` (the model-based first guess at ``num_workers``: :class:`Guess`, :class:`Bound`,
:data:`NEAR`, :func:`guess`) · ``_choice`` (the cheapest setting within noise of the fastest
over paired rounds: :class:`Choice`, :func:`recommend`, :func:`fastest`, and
:func:`out_of_race`, the settings more rounds cannot make the pick; :func:`cheaper`,
:data:`MEMORY_MARGIN`) · ``_confidence``
(how sure a pick is: :class:`Confidence`, :class:`Assurance`, :func:`findings`,
:func:`shortfalls`, :func:`assurance`). The statistics under them are
:mod:`loadertune.paired_stats`. The sweeper (``hydra_plugins.loadertune_sweeper``) adds its
busy-machine and pooled-noise checks; AutoLoader (:mod:`loadertune.autoloader`) its probes.
"""

from loadertune.decision._choice import (
    MEMORY_MARGIN,
    Choice,
    cheaper,
    fastest,
    out_of_race,
    recommend,
)
from loadertune.decision._confidence import (
    Assurance,
    Confidence,
    Findings,
    Shortfall,
    assurance,
    findings,
    shortfalls,
)
from loadertune.decision._guess import NEAR, Bound, Guess, guess

__all__ = [
    "MEMORY_MARGIN",
    "NEAR",
    "Assurance",
    "Bound",
    "Choice",
    "Confidence",
    "Findings",
    "Guess",
    "Shortfall",
    "assurance",
    "cheaper",
    "fastest",
    "findings",
    "guess",
    "out_of_race",
    "recommend",
    "shortfalls",
]
