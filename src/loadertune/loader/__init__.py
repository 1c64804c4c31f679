"""The one place that builds a DataLoader, and the workload and timed loop around it.

Rooms (the names other packages use are re-exported below, each room imported on the first
use of one of its names, so importing the package imports none of them):

- ``_build``: the one place that builds a ``torch.utils.data.DataLoader``.
- ``_exported``: where ``loader=best`` finds the settings a verdict exported, checked before Hydra
  composes.
- ``_rank_share``: a rank's share of a trial's index stream, cut the way ``DistributedSampler``
  cuts a dataset.
- ``_sharding``: whether each rank reads its own share: the check made before an epoch under
  several ranks.
- ``_step_loop``: the training loop a trial times: pull a batch, copy it to the device, step the
  model.
- ``_trainer``: Hugging Face ``Trainer``'s loader from an exported file: the ``TrainingArguments``
  keys that say it, and the refusal of what they cannot.
- ``_workload``: what a trial runs, built once from its config: the dataset on its storage, the
  loader settings that take effect, the model step, and the loader over a stream that cannot run
  dry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadertune._lazy import lazy_package

__all__ = [
    "ALWAYS",
    "TUNED_FOR",
    "LoaderSource",
    "RankCheckedDataLoader",
    "StepLoop",
    "Workload",
    "accelerator_available",
    "build_dataloader",
    "build_loader",
    "build_workload",
    "check_loader_choice",
    "dataloader_kwargs",
    "effective_settings",
    "exported_conf",
    "loader_config",
    "loader_yaml",
    "output_root_of",
    "read_loader_yaml",
    "resolve_device",
    "stop_rule",
    "synchronizer",
    "tensors_in",
    "to_device",
    "trainer_arguments",
    "tuned_for",
    "use_command",
    "warn_if_unsharded",
]

if TYPE_CHECKING:
    from loadertune.loader._build import (
        ALWAYS,
        TUNED_FOR,
        LoaderSource,
        accelerator_available,
        build_dataloader,
        dataloader_kwargs,
        effective_settings,
        loader_config,
        loader_yaml,
        read_loader_yaml,
        tensors_in,
        to_device,
        tuned_for,
    )
    from loadertune.loader._exported import (
        check_loader_choice,
        exported_conf,
        output_root_of,
        use_command,
    )
    from loadertune.loader._sharding import RankCheckedDataLoader, warn_if_unsharded
    from loadertune.loader._step_loop import StepLoop, synchronizer
    from loadertune.loader._trainer import trainer_arguments
    from loadertune.loader._workload import (
        Workload,
        build_loader,
        build_workload,
        resolve_device,
        stop_rule,
    )

__getattr__ = lazy_package(__name__, __file__)
