"""The Optuna study a sweep runs, and the machines that may share it.

Rooms (imported by their own path; this package stays light for Hydra's plugin scan):

- ``_storage``: where the study is stored, its name, resume, orphans, trial slots.
- ``_hosts``: which machine a sweep runs on and whether it may join a study.
- ``_study_file``: the study's SQLite file watched while the sweep runs; a failed study store
  in one line.
"""
