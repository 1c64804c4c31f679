"""Models whose training step a trial times: simulated, or real PyTorch with an optimizer step.

Each model adapts to the dataset's sample shape, read from one sample before the loader is
built; a dataset/model pair that cannot work is rejected then, naming both, rather than deep
in a forward pass.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Protocol

from loadertune.config import MLPConfig, ModelConfig, SimulatedModelConfig, SmallCNNConfig
from loadertune.errors import ConfigError

if TYPE_CHECKING:
    import torch


class TrainStep(Protocol):
    """One training step on a batch already on the device."""

    def __call__(self, inputs: torch.Tensor, targets: torch.Tensor | None) -> None: ...


def split_batch(batch: Any) -> tuple[Any, Any]:
    """(inputs, targets or None) from a tensor, a (inputs, targets, ...) sequence or a dict."""
    if isinstance(batch, dict):
        values = list(batch.values())
        return values[0], (values[1] if len(values) > 1 else None)
    if isinstance(batch, list | tuple):
        return batch[0], (batch[1] if len(batch) > 1 else None)
    return batch, None


def build_train_step(
    model_cfg: ModelConfig, sample: Any, num_classes: int, device: torch.device, dataset_name: str
) -> TrainStep:
    """The training step for ``model_cfg``, shaped for ``sample`` (one item of the dataset)."""
    if isinstance(model_cfg, SimulatedModelConfig):
        return _SimulatedStep(model_cfg.step_ms)
    import torch

    inputs, _ = split_batch(sample)
    if not isinstance(inputs, torch.Tensor):
        raise ConfigError(
            "model.name",
            model_cfg.name,
            f"needs tensor samples but dataset={dataset_name} yields {type(inputs).__name__}",
            "use model=simulated, or return tensors from the dataset",
        )
    network = _network(model_cfg, tuple(inputs.shape), num_classes, dataset_name).to(device)
    optimizer = torch.optim.SGD(network.parameters(), lr=model_cfg.lr, momentum=0.9)
    return _RealStep(network, optimizer, num_classes)


class _SimulatedStep:
    """Stands in for an accelerator step: sleeps, so it holds no CPU while loading runs."""

    def __init__(self, step_ms: float) -> None:
        if step_ms < 0:
            raise ConfigError("model.step_ms", step_ms, "must be >= 0", "e.g. model.step_ms=20")
        self.seconds = step_ms / 1000.0

    def __call__(self, inputs: Any, targets: Any) -> None:
        time.sleep(self.seconds)


class _RealStep:
    """Forward, loss, backward and optimizer step."""

    def __init__(self, network: Any, optimizer: Any, num_classes: int) -> None:
        self.network = network
        self.optimizer = optimizer
        self.num_classes = num_classes

    def __call__(self, inputs: torch.Tensor, targets: torch.Tensor | None) -> None:
        import torch.nn.functional as F

        self.optimizer.zero_grad(set_to_none=True)
        out = self.network(inputs.float())
        if targets is not None and not targets.is_floating_point() and targets.dim() == 1:
            loss = F.cross_entropy(out, targets.long() % self.num_classes)
        else:
            loss = out.float().square().mean()
        loss.backward()  # type: ignore[no-untyped-call]
        self.optimizer.step()


def _network(cfg: ModelConfig, shape: tuple[int, ...], classes: int, dataset: str) -> Any:
    from torch import nn

    if isinstance(cfg, MLPConfig):
        width = math.prod(shape)
        layers: list[nn.Module] = [nn.Flatten()]
        for _ in range(cfg.layers):
            layers += [nn.Linear(width, cfg.hidden), nn.ReLU()]
            width = cfg.hidden
        return nn.Sequential(*layers, nn.Linear(width, classes))
    if isinstance(cfg, SmallCNNConfig):
        if len(shape) != 3:
            raise ConfigError(
                "model.name",
                cfg.name,
                f"needs image samples shaped (C, H, W) but dataset={dataset} yields {shape}",
                "use model=mlp or model=simulated with this dataset",
            )
        c = cfg.channels
        return nn.Sequential(
            nn.Conv2d(shape[0], c, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(c, 2 * c, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(2 * c, 4 * c, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(4 * c, classes),
        )
    raise TypeError(f"unknown model config {type(cfg).__name__}")
