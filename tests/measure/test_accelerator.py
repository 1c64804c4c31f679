"""The CUDA path: pinned memory takes effect, the copy is timed on the device, GPU figures.

Tests that need a GPU skip cleanly without one; the rest check, on any machine, how the copy
time is split out of a step and that asking for absent CUDA is refused with the fix.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from loadertune import run_trial
from loadertune.config._typed import to_run_config
from loadertune.errors import ConfigError
from loadertune.measure._accelerator import CudaCopyTimer, copy_figures, tensor_bytes
from loadertune.measure._timing import StepTimer
from tests.conftest import Compose

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")


class _Event:
    def __init__(self, at_ms: float) -> None:
        self.at_ms = at_ms

    def elapsed_time(self, end: _Event) -> float:
        return end.at_ms - self.at_ms


def _events_timer(copy_ms: float) -> CudaCopyTimer:
    timer = CudaCopyTimer.__new__(CudaCopyTimer)  # no CUDA needed: fake events
    timer.sync, timer.bytes, timer.seconds = (lambda: None), 0, 0.0
    timer._start, timer._end = _Event(0.0), _Event(copy_ms)  # type: ignore[assignment]
    return timer


def _step(clock_marks: list[float]) -> tuple[StepTimer, Any]:
    marks = iter(clock_marks)
    timer = StepTimer(clock=lambda: next(marks))
    timer.start()
    timer.batch_ready()
    timer.copied()
    return timer, timer.stepped(8)


def test_device_copy_time_is_split_out_of_the_step() -> None:
    # host: batch ready at 1.0 s, copy issued (non-blocking) at 1.001, step synced at 1.050
    timer, record = _step([0.0, 1.0, 1.001, 1.050])
    fixed = _events_timer(copy_ms=12.0).finish(timer, record)
    assert fixed.copy_s == pytest.approx(0.012)
    assert fixed.compute_s == pytest.approx(0.038)
    assert fixed.step_s == record.step_s and fixed.wait_s == record.wait_s
    assert timer.records == [fixed]


def test_device_copy_time_never_exceeds_the_step() -> None:
    timer, record = _step([0.0, 1.0, 1.001, 1.010])
    fixed = _events_timer(copy_ms=50.0).finish(timer, record)
    assert fixed.copy_s == pytest.approx(0.010) and fixed.compute_s == pytest.approx(0.0)


def test_copy_speed_from_bytes_and_seconds() -> None:
    timer = _events_timer(0.0)
    timer.bytes, timer.seconds = 64_000_000, 0.01
    assert copy_figures(timer) == {"h2d_mb_per_s": pytest.approx(6400.0)}
    assert tensor_bytes(torch.zeros(2, 3), None, 7, torch.zeros(4, dtype=torch.uint8)) == 28


def test_cpu_trial_records_no_gpu_figures(compose: Compose) -> None:
    result = run_trial(to_run_config(compose(["trial.device=cpu", "loader.pin_memory=true"])))
    assert result.accelerator == {}
    assert result.effective_loader.pin_memory is False  # a no-op without an accelerator


@pytest.mark.skipif(CUDA, reason="this machine has CUDA")
def test_asking_for_absent_cuda_is_refused(compose: Compose) -> None:
    with pytest.raises(ConfigError, match=r"^trial\.device=cuda: asks for CUDA .* Fix: use"):
        run_trial(to_run_config(compose(["trial.device=cuda"])))


@needs_cuda
@pytest.mark.parametrize("pin", [True, False])
def test_cuda_trial_records_copy_and_gpu_figures(compose: Compose, pin: bool) -> None:
    config = to_run_config(
        compose(
            [
                "trial.device=cuda",
                f"loader.pin_memory={str(pin).lower()}",
                "loader.num_workers=1",
                "model=resnet18",
                "model.width=8",
            ]
        )
    )
    result = run_trial(config)
    assert result.device.startswith("cuda")
    assert result.effective_loader.pin_memory is pin
    assert result.effective_loader.non_blocking is pin
    figures = result.metrics()
    assert figures["gpu_memory_peak_mb"] > 0
    assert figures["h2d_mb_per_s"] > 0
    assert 0 < figures["copy_ms_mean"] < figures["step_time_ms_p90"]


@needs_cuda
def test_cuda_language_model_trial(compose: Compose) -> None:
    overrides = [
        "experiment=tokens_gpu",
        "dataset=tokens",
        "model=transformer",
        "dataset.count=20000",
        "dataset.seq_len=64",
        "model.layers=1",
        "model.d_model=64",
        "model.heads=2",
        "loader.pin_memory=true",
    ]
    result = run_trial(to_run_config(compose(overrides)))
    assert result.device.startswith("cuda")
    assert result.metrics()["gpu_memory_peak_mb"] > 0
