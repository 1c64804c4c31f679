"""What a sweep leaves behind: MLflow runs, the results file, the console.

Rooms (imported by their own path; this package stays light for Hydra's plugin scan):

- ``_mlflow_runs``: MLflow parent and child runs, the results file, tables.
- ``_plots``: Optuna's plots of a study, as PNG files.
- ``_verdict_record``: the verdict in MLflow and in the results file.
- ``_console``: what a person watching a sweep sees.
- ``_server_loss``: a tracking server lost mid-sweep: noticed in seconds, exit status 5.
- ``_store_ahead``: a fresh SQLite store made in a process of its own while the sweep starts.
"""
