"""Models whose training step a trial times: simulated, or real PyTorch with an optimizer step.

- ``simulated``: a sleep of ``step_ms`` standing in for an accelerator step (no CPU held).
- ``mlp``, ``small_cnn``, ``resnet18``: classifiers over the sample, SGD with momentum.
- ``transformer``: a GPT-style language model over token sequences, AdamW.
- ``custom``: the user's own step, made by the factory ``model._target_`` names (see
  :mod:`loadertune.models._custom`), on the loader's first batch.

Each model adapts to the dataset's sample shape, read from one sample before the loader is
built; a dataset/model pair that cannot work is refused before that, naming both (see
:func:`check_workload`), rather than deep in a forward pass. torch is imported only when a
step is built, so checking a config stays cheap.

Rooms: ``_pairs`` (which model trains on which dataset's samples), ``_batch`` (a batch's
inputs and targets), ``_steps`` (the training steps), ``_vision`` and ``_transformer`` (the
networks), ``_custom`` (a user's factory or Module).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

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
from loadertune.models._pairs import Samples, check_pair, samples_of

if TYPE_CHECKING:
    import torch

    from loadertune.config import RunConfig

__all__ = [
    "TrainStep",
    "build_train_step",
    "build_user_step",
    "check_model",
    "check_workload",
    "split_batch",
]


class TrainStep(Protocol):
    """One training step (forward, backward, optimizer step) on a batch already on the device.

    The batch is what the loader yields, moved by :func:`loadertune.loader._build.to_device`: a
    tensor, or tuples, lists and dicts of them, as the collate made it.
    """

    def __call__(self, batch: Any, /) -> None: ...


def check_workload(config: RunConfig) -> None:
    """Check the model's knobs, and that it can train on what the dataset yields."""
    check_model(config.model)
    samples = samples_of(config.dataset)
    if samples is not None:
        check_pair(config.model, samples, config.dataset.name)


def check_model(cfg: ModelConfig) -> None:
    """Reject model knobs out of their documented range."""
    if isinstance(cfg, SimulatedModelConfig):
        if cfg.step_ms < 0:
            raise ConfigError("model.step_ms", cfg.step_ms, "must be >= 0", "e.g. model.step_ms=20")
        return
    if isinstance(cfg, CustomModelConfig):
        return  # the factory is checked with the user's code (loadertune.checks._user_code)
    if not cfg.lr > 0:
        raise ConfigError("model.lr", cfg.lr, "must be > 0", "e.g. model.lr=0.01")
    if isinstance(cfg, MLPConfig):
        _at_least("model.hidden", cfg.hidden, 1, "256")
        _at_least("model.layers", cfg.layers, 0, "2")
    elif isinstance(cfg, SmallCNNConfig):
        _at_least("model.channels", cfg.channels, 1, "16")
    elif isinstance(cfg, ResNet18Config):
        _at_least("model.width", cfg.width, 1, "64")
        if cfg.stem not in ("auto", "imagenet", "cifar"):
            raise ConfigError(
                "model.stem", cfg.stem, "is not a stem", "use auto, imagenet or cifar"
            )
    elif isinstance(cfg, TransformerConfig):
        _at_least("model.layers", cfg.layers, 1, "4")
        _at_least("model.heads", cfg.heads, 1, "4")
        _at_least("model.mlp_ratio", cfg.mlp_ratio, 1, "4")
        if cfg.d_model < 1 or cfg.d_model % cfg.heads:
            raise ConfigError(
                "model.d_model",
                cfg.d_model,
                f"must be a positive multiple of model.heads={cfg.heads}",
                f"e.g. model.d_model={64 * cfg.heads}",
            )
        if cfg.vocab_size is not None and cfg.vocab_size < 2:
            raise ConfigError(
                "model.vocab_size",
                cfg.vocab_size,
                "must be >= 2",
                "e.g. model.vocab_size=null to take the dataset's",
            )


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
    from loadertune.models._steps import SimulatedStep

    check_model(model_cfg)
    if isinstance(model_cfg, SimulatedModelConfig):
        return SimulatedStep(model_cfg.step_ms)
    if isinstance(model_cfg, CustomModelConfig):
        from loadertune.models._custom import LazyUserStep

        return LazyUserStep(model_cfg, device)

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


def build_user_step(cfg: CustomModelConfig, device: torch.device, batch: Any) -> TrainStep:
    """The step the user's factory makes for ``batch`` on ``device`` (a Module is wrapped).

    Raises:
        ConfigError: naming ``model._target_`` when the factory raises or returns neither a
            callable nor a ``torch.nn.Module``.
    """
    from loadertune.models._custom import build_user_step as build

    return build(cfg, device, batch)


def _classifier_step(
    cfg: ModelConfig, shape: tuple[int, ...], classes: int, device: torch.device
) -> TrainStep:

    from loadertune.models import _vision
    from loadertune.models._steps import RealStep, as_float, classification_loss

    network: torch.nn.Module
    if isinstance(cfg, MLPConfig):
        network = _vision.mlp(shape, cfg.hidden, cfg.layers, classes)
    elif isinstance(cfg, SmallCNNConfig):
        network = _vision.small_cnn(shape[0], cfg.channels, classes)
    elif isinstance(cfg, ResNet18Config):
        network = _vision.resnet18(shape, classes, cfg.width, cfg.stem)
    else:
        raise TypeError(f"unknown model config {type(cfg).__name__}")
    network = network.to(device)
    optimizer = torch.optim.SGD(network.parameters(), lr=cfg.lr, momentum=0.9)

    def forward(net: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor | None) -> Any:
        return classification_loss(net(as_float(inputs)), targets, classes)

    return RealStep(network, optimizer, forward)


def _language_model_step(
    cfg: TransformerConfig,
    shape: tuple[int, ...],
    dataset_vocab: int | None,
    device: torch.device,
    dataset_name: str,
) -> TrainStep:

    from loadertune.models._steps import RealStep
    from loadertune.models._transformer import TokenTransformer, next_token_loss

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
    network = TokenTransformer(vocab, shape[0], cfg.layers, cfg.d_model, cfg.heads, cfg.mlp_ratio)
    network = network.to(device)
    optimizer = torch.optim.AdamW(network.parameters(), lr=cfg.lr)

    def forward(net: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor | None) -> Any:
        return next_token_loss(net(inputs), inputs, targets)

    return RealStep(network, optimizer, forward)


def _at_least(key: str, value: int, low: int, example: str) -> None:
    if value < low:
        raise ConfigError(key, value, f"must be >= {low}", f"e.g. {key}={example}")
