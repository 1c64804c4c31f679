"""Where a sweep starts: here, or fanned out over hosts.

Rooms (imported by their own path; this package stays light for Hydra's plugin scan):

- ``_start``: check the settings, then fan out or run the study here.
- ``_fanout``: one study over several hosts through a Hydra launcher.
"""
