"""``AutoLoader``: a DataLoader that tunes its own settings during the first training steps.

Rooms, top to bottom: ``_loader`` (the public class and its checkpoint state) → ``_driver``
(the loop: timing, switching, settling) → ``_tail`` (one process's switches: the look-ahead
of a booked segment, the next probe started under it) → ``_usage`` (a segment's CPU, memory
and run-queue figures) · ``_slowest`` (a segment as every rank measured it) → ``_probe``
(one probe loader and its faults) ·
``_plan`` (exactly-once index bookkeeping) → ``_decision`` (choice, confidence, report, on
:mod:`loadertune.decision`) · ``_record`` (MLflow, best_loader.yaml) → ``_schedule`` (guess,
candidates, rounds); ``_accelerate`` (Accelerate's prepared loader with an AutoLoader inside);
``_trainer`` (Hugging Face ``Trainer`` with one inside; imports ``transformers``, so only
``loadertune.AutoLoaderTrainer`` reaches it); ``_contract`` (a ``DataLoader`` by PyTorch's
contract), ``_state`` (checkpoint state as plain data), ``_world`` (the ranks tuned together).
"""

from __future__ import annotations

from loadertune.autoloader._accelerate import prepare_autoloader
from loadertune.autoloader._loader import AutoLoader

__all__ = ["AutoLoader", "prepare_autoloader"]
