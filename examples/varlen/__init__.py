"""A worked example for ``model=custom``: variable-length token sequences, padded per batch.

Put the ``examples`` folder on ``PYTHONPATH`` and name these by dotted path (see
docs/custom_training.md): ``varlen.data.VarLenTokens`` (the Dataset),
``varlen.data.pad_collate`` (the collate), ``varlen.data.seed_worker`` (the worker init),
``varlen.train.make_step`` (a step factory) and ``varlen.train.TinyLM`` (a Module trained with
loadertune's default loss and SGD).
"""
