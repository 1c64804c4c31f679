"""Fixed cost per sweep trial outside the measured steps, and the default sweep's wall time.

Runs ``loadertune -m`` in a fresh temporary outputs folder, then compares, for each trial
after the first, the time between consecutive trial starts (Optuna's timestamps: ask, compose,
fork, dataset and model set-up, measurement, MLflow record, tell) with the part the trial
spent measuring (``measure_s``: first batch, warm-up and timed steps).

    .venv/bin/python benchmarks/sweep_cost.py [override ...]
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
import tempfile
from pathlib import Path

from _common import multirun


def main() -> None:
    overrides = sys.argv[1:]
    if overrides[:1] == ["--analyse"]:  # a finished run's folder: analyse it again
        out, wall, overrides = Path(overrides[1]), float("nan"), []
    else:
        out = Path(tempfile.mkdtemp(prefix="loadertune-bench-"))
        proc, wall = multirun(out, ["hydra.sweeper.study_name=bench", *overrides])
        if proc.returncode:
            sys.exit(proc.stderr)
    import optuna
    from mlflow import MlflowClient

    study = optuna.load_study(study_name="bench", storage=f"sqlite:///{out}/optuna.db")
    trials = [t for t in study.trials if t.state.is_finished()]
    client = MlflowClient(f"sqlite:///{out}/mlflow.db")
    measure = {}
    for run in client.search_runs(["1"], max_results=1000):
        number = run.data.tags.get("optuna.trial_number")
        complete = run.data.tags.get("optuna.state") == "COMPLETE"
        if number is not None and complete and "repeat_of" not in run.data.tags:
            path = client.download_artifacts(run.info.run_id, "trial_result.json", str(out))
            measure[int(number)] = json.loads(Path(path).read_text())["measure_s"]
    gaps = []
    for prev, cur in itertools.pairwise(trials):
        if prev.number in measure and prev.datetime_start and cur.datetime_start:
            gap = (cur.datetime_start - prev.datetime_start).total_seconds()
            gaps.append(gap - measure[prev.number])
    best = min((t for t in trials if t.value is not None), key=lambda t: t.value)
    zero = [t.value for t in trials if t.params.get("loader.num_workers") == 0 and t.value]
    print(f"overrides: {' '.join(overrides) or '(defaults)'}; outputs in {out}")
    print(f"sweep wall time: {wall:.1f} s for {len(trials)} trials (dataset generation included)")
    print(
        f"fixed cost per trial outside the measured steps: median {statistics.median(gaps):.2f}"
        f" s, max {max(gaps):.2f} s over {len(gaps)} trials"
    )
    print(f"best trial {best.number}: {best.value:.4f} ms/sample {best.params}")
    if zero:
        print(f"num_workers=0: {min(zero):.4f} ms/sample; best/zero = {best.value / min(zero):.3f}")


if __name__ == "__main__":
    main()
