"""The verdict: candidates measured again, the cheapest one as fast, how sure, in words.

Rooms (imported by their own path; this package stays light for Hydra's plugin scan):

- ``_candidates``: candidates from Optuna trials and the cheapest setting shown as fast.
- ``_confidence``: how sure the verdict is, with the sentence that says why.
- ``_text``: the verdict in words: ``verdict.md``, the terminal table, the loader YAML.
- ``_figure``: the verdict's figure.
- ``_race``: the rounds: which settings each measures, when they stop, what they cost.
- ``_rounds``: the verdict run: candidates interleaved, the recommendation, the export.
"""
