"""``model=custom``: a user's factory makes the step, or a Module trained with a default loss.

The factory named by ``model._target_`` is called with the ``+model.*`` keyword arguments, and
with ``device`` and a sample ``batch`` when its signature names them. It returns a
``step(batch)`` callable, used as is, or a ``torch.nn.Module``, trained by :class:`ModuleStep`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from loadertune.config import CustomModelConfig, resolve
from loadertune.errors import ConfigError
from loadertune.models._batch import split_batch

KEY = "model._target_"
DEFAULT_LR = 0.01
"""SGD's learning rate (momentum 0.9) for a Module returned by the factory."""


def build_user_step(
    cfg: CustomModelConfig, device: torch.device, batch: Any
) -> Callable[[Any], None]:
    """Call the factory and return the step it describes, for batches on ``device``.

    Raises:
        ConfigError: naming ``model._target_``: the factory raised, or returned neither a
            callable nor a Module.
    """

    factory = resolve(KEY, cfg.target)
    try:
        made = factory(**cfg.kwargs, **_offered(factory, cfg.kwargs, device, batch))
    except Exception as exc:
        line = (str(exc).strip().splitlines() or [""])[0]
        given = ", ".join(f"+model.{k}" for k in cfg.kwargs) or "no +model.* arguments"
        raise ConfigError(
            KEY,
            cfg.target,
            f"raised {type(exc).__name__}: {line}",
            f"fix the factory, or the keyword arguments it was given ({given})",
        ) from None
    if isinstance(made, torch.nn.Module):
        return ModuleStep(cfg.target, made.to(device))
    if callable(made):
        return made  # type: ignore[no-any-return]
    raise ConfigError(
        KEY,
        cfg.target,
        f"returned {type(made).__name__}, neither a step(batch) callable nor a torch.nn.Module",
        "return the function that does one training step, or the Module to train",
    )


def _offered(
    factory: Callable[..., Any], kwargs: dict[str, Any], device: torch.device, batch: Any
) -> dict[str, Any]:
    """``device`` and ``batch`` for the factory's parameters of those names (if not given)."""
    try:
        names = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return {}
    offer = {"device": device, "batch": batch}
    return {k: v for k, v in offer.items() if k in names and k not in kwargs}


def default_loss(out: Any, targets: Any) -> torch.Tensor:
    """Cross-entropy when ``out`` scores classes for integer ``targets``, else ``out``'s mean.

    Scores match targets when ``out`` has the targets' shape plus one class axis: (B, C) for
    (B,) labels, (B, L, V) for (B, L) next tokens. Targets of -100 (padding) are ignored.
    """
    if isinstance(out, list | tuple):
        out = out[0]
    integer = (
        isinstance(targets, torch.Tensor)
        and not targets.is_floating_point()
        and targets.dtype != torch.bool
    )
    if integer and out.dim() == targets.dim() + 1 and out.shape[:-1] == targets.shape:
        return F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), targets.reshape(-1).long())
    mean: torch.Tensor = out.float().mean()
    return mean


class ModuleStep:
    """Train a user's Module: its output on the batch's input, :func:`default_loss`, SGD."""

    def __init__(self, target: str, module: torch.nn.Module) -> None:
        params = [p for p in module.parameters() if p.requires_grad]
        if not params:
            raise ConfigError(
                KEY,
                target,
                "returned a Module with no trainable parameters",
                "return a step(batch) callable instead, or a Module with parameters",
            )
        self.module = module.train()
        self.optimizer = torch.optim.SGD(params, lr=DEFAULT_LR, momentum=0.9)

    def __call__(self, batch: Any) -> None:
        inputs, targets = split_batch(batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss: Any = default_loss(self.module(inputs), targets)
        loss.backward()
        self.optimizer.step()


class LazyUserStep:
    """The user's step, made on the first batch it gets: the loader's own, on the device.

    A trial's first step is outside the timed window, so making the step there costs the
    measurement nothing, and the factory sizes itself from a batch the user's collate made.
    """

    def __init__(self, cfg: CustomModelConfig, device: torch.device) -> None:
        self.cfg = cfg
        self.device = device
        self.step: Callable[[Any], None] | None = None

    def __call__(self, batch: Any) -> None:
        if self.step is None:
            self.step = build_user_step(self.cfg, self.device, batch)
        self.step(batch)
