"""Models whose training step a trial times: simulated, or real PyTorch with an optimizer step.

- ``simulated``: a sleep of ``step_ms`` standing in for an accelerator step (no CPU held).
- ``mlp``, ``small_cnn``, ``resnet18``: classifiers over the sample, SGD with momentum.
- ``transformer``: a GPT-style language model over token sequences, AdamW.
- ``custom``: the user's own step, made by the factory ``model._target_`` names (see
  :mod:`loadertune.models._custom`), on the loader's first batch.

Each model adapts to the dataset's sample shape, read from one sample before the loader is
built; a dataset/model pair that cannot work is refused before that, naming both (see
:func:`check_workload`), rather than deep in a forward pass. PyTorch is imported only when
a step is built, so checking a config stays cheap.

Rooms: ``_checks`` (a model's knobs and its dataset checked), ``_build`` (the step a config
names), ``_pairs`` (which model trains on which dataset's samples), ``_batch`` (a batch's
inputs and targets), ``_steps`` (the training steps), ``_vision`` and ``_transformer`` (the
networks), ``_custom`` (a user's factory or Module). Every name here is imported on its first
use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadertune._lazy import lazy_package

__all__ = [
    "LazyUserStep",
    "ModuleStep",
    "RealStep",
    "SimulatedStep",
    "TokenTransformer",
    "TrainStep",
    "as_float",
    "build_train_step",
    "build_user_step",
    "check_model",
    "check_workload",
    "classification_loss",
    "mlp",
    "next_token_loss",
    "resnet18",
    "samples_in",
    "small_cnn",
    "split_batch",
]

if TYPE_CHECKING:
    from loadertune.models._batch import samples_in, split_batch
    from loadertune.models._build import TrainStep, build_train_step
    from loadertune.models._checks import check_model, check_workload
    from loadertune.models._custom import LazyUserStep, ModuleStep, build_user_step
    from loadertune.models._steps import RealStep, SimulatedStep, as_float, classification_loss
    from loadertune.models._transformer import TokenTransformer, next_token_loss
    from loadertune.models._vision import mlp, resnet18, small_cnn

__getattr__ = lazy_package(__name__, __file__)
