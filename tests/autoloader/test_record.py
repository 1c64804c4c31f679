"""AutoLoader's record: the MLflow run (a real SQLite store, read back with MlflowClient) and
the exported ``best_loader.yaml``, which ``build_dataloader`` and ``loader=best`` take."""

from __future__ import annotations

from pathlib import Path

import pytest
from torch.utils.data import Dataset

from loadertune import AutoLoader, build_dataloader
from loadertune.config._typed import LoaderConfig
from loadertune.measure._diagnosis import LABELS
from loadertune.record._tracking import param_text

CANDIDATES = [{"num_workers": 0}, {"num_workers": 1}]


class Ints(Dataset[int]):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> int:
        return i


def train(loader: AutoLoader, epochs: int = 2) -> None:
    for _ in range(epochs):
        for _batch in loader:
            pass


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh SQLite tracking store, set as MLflow's tracking URI for the test."""
    import mlflow

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    yield uri
    mlflow.set_tracking_uri(None)  # type: ignore[arg-type]


def test_session_is_a_child_of_the_users_run(store: str) -> None:
    import mlflow
    from mlflow import MlflowClient

    mlflow.set_experiment("mine")
    with mlflow.start_run() as parent:
        loader = AutoLoader(Ints(), batch_size=2, tune_steps=48, candidates=CANDIDATES)
        train(loader)
        assert mlflow.active_run().info.run_id == parent.info.run_id  # still the user's
    run = MlflowClient().get_run(loader.run_id or "")
    assert run.data.tags["loadertune.autotune"] == "true"
    assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert run.info.experiment_id == parent.info.experiment_id
    for key, value in loader.settings.items():
        assert run.data.params[f"loader.{key}"] == param_text(value)
    assert run.data.tags["verdict.confidence"] in ("high", "medium", "low")
    assert run.data.tags["verdict.bottleneck"] in LABELS
    assert run.data.tags["verdict.bottleneck"] == loader.decision.bottleneck  # type: ignore[union-attr]
    assert {"probe.w0.ms_per_batch", "probe.w1.ms_per_batch", "probe.w1.startup_s"} <= set(
        run.data.metrics
    )
    names = {a.path for a in MlflowClient().list_artifacts(run.info.run_id)}
    assert {"best_loader.yaml", "autotune_report.txt", "probes.json"} <= names


def test_without_a_run_open_the_session_is_its_own_run(store: str) -> None:
    from mlflow import MlflowClient

    loader = AutoLoader(Ints(), batch_size=2, tune_steps=48, candidates=CANDIDATES)
    train(loader)
    client = MlflowClient()
    runs = client.search_runs(
        [client.get_experiment_by_name("loadertune").experiment_id],
        "tags.`loadertune.autotune` = 'true'",
    )
    assert [r.info.run_id for r in runs] == [loader.run_id]
    assert "mlflow.parentRunId" not in runs[0].data.tags
    assert runs[0].info.status == "FINISHED"


def test_no_record_without_mlflow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    loader = AutoLoader(Ints(), batch_size=2, tune_steps=48, candidates=CANDIDATES, track=False)
    train(loader)
    assert loader.run_id is None and loader.decision is not None


def test_export_loads_with_build_dataloader(tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    path = tmp_path / "conf" / "best_loader.yaml"
    loader = AutoLoader(
        Ints(), batch_size=4, shuffle=True, tune_steps=48, candidates=CANDIDATES,
        export=path, track=False,
    )  # fmt: skip
    train(loader, epochs=4)
    text = path.read_text()
    assert text.startswith("# Chosen by loadertune.AutoLoader")
    cfg = OmegaConf.load(path)
    assert dict(cfg) == loader.settings
    assert set(cfg) == set(LoaderConfig.__dataclass_fields__)  # the loader group's keys
    rebuilt = build_dataloader(Ints(), cfg, device="cpu")
    assert rebuilt.num_workers == loader.settings["num_workers"]
    assert sorted(int(i) for b in rebuilt for i in b) == list(range(64))
