"""The training step a config names, shaped for the dataset's first sample: each network's
module (and PyTorch) imported when its step is built, through the package's lazy names."""

from __future__ import annotations

from typing import Any, Protocol

from loadertune import models
from loadertune._lazy import torch
from loadertune.config import (
    CustomModelConfig,
    MLPConfig,
    ModelConfig,
    ResNet18Config,
    SimulatedModelConfig,
    SmallCNNConfig,
    TransformerConfig,
)
from loadertune.errors import ConfigError
from loadertune.models._batch import split_batch
from loadertune.models._checks import check_model
from loadertune.models._pairs import Samples, check_pair


class TrainStep(Protocol):
    """One training step (forward, backward, optimizer step) on a batch already on the device.

    The batch is what the loader yields, moved by :func:`loadertune.loader._build.to_device`: a
    tensor, or tuples, lists and dicts of them, as the collate made it.
    """

    def __call__(self, batch: Any, /) -> None: ...


def build_train_step(
    model_cfg: ModelConfig,
    sample: Any,
    num_classes: int,
    device: torch.device,
    dataset_name: str,
    vocab_size: int | None = None,
) -> TrainStep:
    """The training step for ``model_cfg``, shaped for ``sample`` (one item of the dataset).

    A ``custom`` step is made by the user's factory on the first batch it is given (the
    loader's, collated and on ``device``), which a trial takes outside its timed window.

    Raises:
        ConfigError: the model cannot take this sample, naming the model and the dataset.
    """
    check_model(model_cfg)
    if isinstance(model_cfg, SimulatedModelConfig):
        return models.SimulatedStep(model_cfg.step_ms)
    if isinstance(model_cfg, CustomModelConfig):
        return models.LazyUserStep(model_cfg, device)

    inputs, _ = split_batch(sample)
    if not isinstance(inputs, torch.Tensor):
        raise ConfigError(
            "model.name",
            model_cfg.name,
            f"needs tensor samples but dataset={dataset_name} yields {type(inputs).__name__}",
            "use model=simulated, or return tensors from the dataset",
        )
    shape = tuple(inputs.shape)
    integer = not inputs.is_floating_point() and inputs.dtype != torch.bool
    what = f"{str(inputs.dtype).removeprefix('torch.')} tensors shaped {shape}"
    check_pair(model_cfg, Samples(shape, integer, what), dataset_name)
    if isinstance(model_cfg, TransformerConfig):
        return _language_model_step(model_cfg, shape, vocab_size, device, dataset_name)
    return _classifier_step(model_cfg, shape, num_classes, device)


def _classifier_step(
    cfg: ModelConfig, shape: tuple[int, ...], classes: int, device: torch.device
) -> TrainStep:
    network: torch.nn.Module
    if isinstance(cfg, MLPConfig):
        network = models.mlp(shape, cfg.hidden, cfg.layers, classes)
    elif isinstance(cfg, SmallCNNConfig):
        network = models.small_cnn(shape[0], cfg.channels, classes)
    elif isinstance(cfg, ResNet18Config):
        network = models.resnet18(shape, classes, cfg.width, cfg.stem)
    else:
        raise TypeError(f"unknown model config {type(cfg).__name__}")
    network = network.to(device)
    optimizer = torch.optim.SGD(network.parameters(), lr=cfg.lr, momentum=0.9)

    def forward(net: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor | None) -> Any:
        return models.classification_loss(net(models.as_float(inputs)), targets, classes)

    return models.RealStep(network, optimizer, forward)


def _language_model_step(
    cfg: TransformerConfig,
    shape: tuple[int, ...],
    dataset_vocab: int | None,
    device: torch.device,
    dataset_name: str,
) -> TrainStep:
    vocab = cfg.vocab_size or dataset_vocab
    if cfg.vocab_size and dataset_vocab and cfg.vocab_size < dataset_vocab:
        raise ConfigError(
            "model.vocab_size",
            cfg.vocab_size,
            f"is smaller than dataset={dataset_name}'s vocabulary of {dataset_vocab} ids",
            "set model.vocab_size=null to take the dataset's",
        )
    if vocab is None:
        raise ConfigError(
            "model.vocab_size",
            None,
            f"is needed: dataset={dataset_name} does not say how many token ids it uses",
            "set model.vocab_size to the largest token id + 1",
        )
    network = models.TokenTransformer(
        vocab, shape[0], cfg.layers, cfg.d_model, cfg.heads, cfg.mlp_ratio
    )
    network = network.to(device)
    optimizer = torch.optim.AdamW(network.parameters(), lr=cfg.lr)

    def forward(net: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor | None) -> Any:
        return models.next_token_loss(net(inputs), inputs, targets)

    return models.RealStep(network, optimizer, forward)
