"""What a sweep searches: the space, the fixed settings, the baselines and the guess.

Rooms (imported by their own path; this package stays light for Hydra's plugin scan):

- ``_settings_checks``: checks of the ``hydra.sweeper`` settings, each naming its key.
- ``_search_space``: Hydra's sweep grammar into Optuna distributions.
- ``_samplers``: Optuna's sampler and pruner from the config nodes.
- ``_sweep_plan``: the plan (space, fixed settings, study) and values <-> overrides <-> job config.
- ``_baselines``: the advice measured in every study (``Role``).
- ``_guess``: the model-based guess from the default trial and the ``num_workers`` range it sets.
- ``_enumerate``: a small finite space walked in order of promise (the guess first, then
  outward) instead of sampled, and when every setting has an answer.
- ``_refine``: the fewest workers as fast as the most, by bisection between the counts
  measured (a wide range is not walked one count at a time).
- ``_ceiling``: when no loader setting left can beat the fastest measured (the loader is
  hidden, or loading fills the CPUs): the search may stop.
"""
