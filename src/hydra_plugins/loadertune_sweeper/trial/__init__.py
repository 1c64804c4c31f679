"""One trial of a sweep: its process, its timed window, its outcome.

Rooms (imported by their own path; this package stays light for Hydra's plugin scan):

- ``_trial_process``: the trial's child process, followed, pruned, killed on a limit, cleaned up.
- ``_stall_watch``: the limits on a trial's silence: start-up, between steps, the whole run.
- ``_group``: the trial process's group: ended, its members, killed whole; its shm files.
- ``_busy_machine``: other work on the machine: say when it is busy, or wait for it.
- ``_measure``: one timed window in its own trial process, other work in view.
- ``_outcome``: one claimed trial refused, repeated or measured; told and recorded.
- ``_warm_parent``: the sweep imports a trial's path once, before the first trial is forked.
- ``_noise_pruner``: the default pruner: a trial is pruned only when its measured interval
  lies above the best's by more than a tolerance.
"""
