"""A real ``loadertune -m`` whose loader is hidden behind its step: the search stops at the
ceiling (``plan._ceiling``) when the rule holds, and says so in the terminal, ``verdict.md``
and the study; it runs to its budget only while the rule never held."""

from __future__ import annotations

import re
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from hydra_plugins.loadertune_sweeper.plan import _ceiling
from tests._sweeps import finished, study_at, sweep
from tests.e2e.test_sweep import SLOW_READS
from tests.sweeper.plan.test_ceiling import _plan

pytestmark = pytest.mark.slow

optuna.logging.set_verbosity(optuna.logging.WARNING)

# test_sweep's SLOW_READS (every read waits 20 ms: a worker loads a batch of 4 in over 80 ms)
# under a step of 150 ms. 0 workers wait for data; 1 or more hide the loading, on a busy
# machine too (waiting costs no CPU), but for receiving each batch: about 2 ms of a 60 ms
# step (3%) here, so the step is long enough for that to fall within the tolerance.
HIDDEN_BEHIND_THE_STEP = [
    *SLOW_READS,
    "model.step_ms=150",
    "hydra.sweeper.study_name=s",
    "hydra.sweeper.params.loader.num_workers=int(interval(0,6))",
    "hydra.sweeper.params.loader.prefetch_factor=2",
    "hydra.sweeper.guess_range=false",
    "hydra.sweeper.n_trials=5",
    "hydra.sweeper.verdict_repeats=2",
    "hydra.sweeper.verdict_top=2",
    "hydra.sweeper.stop_at_ceiling=true",
]


def test_a_hidden_loader_stops_the_search_and_every_place_says_why(tmp_path: Path) -> None:
    proc = sweep(tmp_path, *HIDDEN_BEHIND_THE_STEP, verdict=True)
    assert proc.returncode == 0, proc.stderr
    study = study_at(tmp_path)
    (sweep_dir,) = (tmp_path / "multirun").glob("*/*")
    verdict = (sweep_dir / "verdict.md").read_text()
    stopped = [line for line in verdict.splitlines() if "stopped before its trial budget" in line]
    why = _ceiling.stopped_why(study)
    measured = [t for t in finished(tmp_path) if "repeat_of" not in t.user_attrs]
    if why is None:
        # Ran to its budget: then the rule held after none of its trials, the last included.
        assert stopped == [] and "stopping the search" not in proc.stdout
        plan = _plan(tmp_path, dict(measured[-1].distributions))
        assert _ceiling.reached(study, plan, 2) is None
        return
    assert f"stopping the search: {why}" in " ".join(proc.stdout.split())
    assert stopped == [f"The search stopped before its trial budget: {why}."]
    assert len(measured) <= 5
    # The setting it names hid the loader, and its neighbours were measured.
    found = re.match(r"num_workers=(\d+) \(trial (\d+)\) hides the loader", why)
    assert found, why
    workers, number = int(found[1]), int(found[2])
    named = study.trials[number]
    assert named.params["loader.num_workers"] == workers
    # The count is kept for the verdict, which holds its pick to it unless its rounds show
    # more workers faster (verdict._candidates.within_ceiling).
    assert _ceiling.enough_workers(study) == workers
    pick = re.search(r"\*\*Recommended: num_workers=(\d+)\*\*", verdict)
    assert pick, verdict
    held = f"the fastest setting of at most {workers} workers" in verdict
    assert not held or int(pick[1]) <= workers
    assert named.user_attrs["data_wait_fraction"] <= _ceiling.HIDDEN_WAIT
    counts = {
        t.params["loader.num_workers"]
        for t in measured
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
    }
    assert workers - 1 in counts and (workers == 6 or max(counts) > workers), counts
    complete = [t for t in measured if t.state == TrialState.COMPLETE and t.value is not None]
    assert named.value == min(t.value for t in complete if t.value is not None)
