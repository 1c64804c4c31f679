"""The decision rules a sweep's verdict and AutoLoader share, on plain measurements.

Four rooms, each fed plain numbers so either caller adapts its own measurements to them:
``_guess`` (the model-based first guess at ``num_workers``: :class:`Guess`, :class:`Bound`,
:data:`NEAR`, :func:`guess`) · ``_choice`` (the cheapest setting shown as fast as the
fastest over paired rounds: :class:`Choice`, :class:`Unshown`, :func:`recommend`,
:func:`fastest`, and :func:`out_of_race`, the settings that lost every round; :func:`cheaper`,
:data:`MEMORY_MARGIN`) · ``_worth`` (what another round can still buy: :func:`worth_a_round`,
:class:`Outlook`, and why a setting is done: :data:`SETTLED`, :data:`SLOWER`, :data:`STUCK`)
· ``_confidence``
(how sure a pick is: :class:`Confidence`, :class:`Assurance`, :func:`findings`,
:func:`shortfalls`, :func:`assurance`). The statistics under them are
:mod:`loadertune.measure._paired_stats`. The sweeper (``hydra_plugins.loadertune_sweeper``) adds its
busy-machine and pooled-noise checks; AutoLoader (:mod:`loadertune.autoloader`) its probes.
"""

from loadertune.decision._choice import (
    MEMORY_MARGIN,
    Choice,
    Unshown,
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
    up_to,
)
from loadertune.decision._guess import NEAR, Bound, Guess, guess
from loadertune.decision._worth import (
    CHEAPER,
    MIN_GAIN,
    RIVAL,
    SETTLED,
    SLOWER,
    STUCK,
    Outlook,
    worth_a_round,
)

__all__ = [
    "CHEAPER",
    "MEMORY_MARGIN",
    "MIN_GAIN",
    "NEAR",
    "RIVAL",
    "SETTLED",
    "SLOWER",
    "STUCK",
    "Assurance",
    "Bound",
    "Choice",
    "Confidence",
    "Findings",
    "Guess",
    "Outlook",
    "Shortfall",
    "Unshown",
    "assurance",
    "cheaper",
    "fastest",
    "findings",
    "guess",
    "out_of_race",
    "recommend",
    "shortfalls",
    "up_to",
    "worth_a_round",
]
