"""The sweep loop and what keeps it whole.

Rooms (imported by their own path; this package stays light for Hydra's plugin scan):

- ``_loop``: ask, answer, tell and record, queue the next; then the verdict (``SweepEngine``).
- ``_next``: what to measure next (the baselines' rungs, the walk, steering a sampler that
  repeats itself) and how long a search trial times.
- ``_enough``: when a search stops short of its budget (covered, repeating, at a ceiling).
- ``_halt``: how a sweep ends when it cannot go on: one line and an exit status.
- ``_repair``: what every start repairs: runs a dead sweep left RUNNING, missing baselines.
"""
