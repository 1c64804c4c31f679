"""The CUDA path: host-to-device copies timed on the device, GPU memory and utilisation.

On CUDA a copy with ``non_blocking=True`` from pinned memory returns at once and runs on the
GPU's stream; timing it with the host clock would measure nothing, and synchronising after it
would serialise the host with the copy that ``pin_memory`` exists to overlap. So the copy is
bracketed with CUDA events, the step ends with one ``synchronize`` (the step's wall time then
includes the GPU's work), and the copy's device time is read from the events afterwards. On
the CPU the copy is timed by the host clock, as before.

GPU utilisation comes from NVML through ``torch.cuda.utilization`` (it needs the
``nvidia-ml-py`` package); where that is missing the trial says so in its warnings and
records memory only. NVML reports the share of the last sample period (1/6 s to 1 s,
depending on the GPU) during which a kernel ran, so it is coarse; ``h2d_mb_per_s`` and the
step split are the finer figures.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from loadertune._lazy import torch
from loadertune.measure._timing import StepRecord, StepTimer


def tensor_bytes(*values: Any) -> int:
    """Bytes of the tensors among ``values`` (None and non-tensors count zero)."""
    return sum(int(v.element_size() * v.numel()) for v in values if hasattr(v, "element_size"))


class HostCopyTimer:
    """CPU (or any device without events): the copy is timed by the step's host clock."""

    def __init__(self, sync: Any) -> None:
        self.sync = sync
        self.bytes = 0
        self.seconds = 0.0

    def start(self) -> None:
        """The copy is about to be issued."""

    def stop(self, *copied: Any) -> None:
        """The copy was issued; wait for it, so the host clock sees its end."""
        self.sync()
        self.bytes += tensor_bytes(*copied)

    def finish(self, timer: StepTimer, record: StepRecord) -> StepRecord:
        """The step is over (synchronised); return its record with the copy accounted."""
        self.seconds += record.copy_s
        return record

    def reset(self) -> None:
        """Start counting copied bytes and seconds afresh (the timed window begins)."""
        self.bytes, self.seconds = 0, 0.0


class CudaCopyTimer(HostCopyTimer):
    """CUDA: the copy is bracketed by events on the current stream; no extra synchronise."""

    def __init__(self, sync: Any) -> None:
        super().__init__(sync)
        self._start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        self._end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]

    def start(self) -> None:
        self._start.record()

    def stop(self, *copied: Any) -> None:
        self._end.record()
        self.bytes += tensor_bytes(*copied)

    def finish(self, timer: StepTimer, record: StepRecord) -> StepRecord:
        """Split the time after the batch arrived into the copy (device time) and the rest."""
        after_batch = record.copy_s + record.compute_s
        copy_s = min(self._start.elapsed_time(self._end) / 1000.0, after_batch)
        record = dataclasses.replace(record, copy_s=copy_s, compute_s=after_batch - copy_s)
        if timer.records and timer.records[-1].index == record.index:
            timer.records[-1] = record
        self.seconds += copy_s
        return record


def copy_timer(device: Any, sync: Any) -> HostCopyTimer:
    """The copy timer for ``device``."""
    return CudaCopyTimer(sync) if device.type == "cuda" else HostCopyTimer(sync)


class GpuMonitor:
    """Peak GPU memory over the timed window, and NVML utilisation sampled in a thread."""

    def __init__(self, device: Any, hz: float) -> None:
        self.device = device
        self.interval = 1.0 / min(hz, 10.0)
        self.samples: list[float] = []
        self.warnings: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Reset the peak-memory counters and start sampling utilisation."""
        torch.cuda.reset_peak_memory_stats(self.device)
        try:
            torch.cuda.utilization(self.device)
        except Exception as exc:  # no NVML binding or driver: record memory only
            self.warnings.append(f"GPU utilisation not recorded ({exc}); pip install nvidia-ml-py")
            return
        self._thread = threading.Thread(target=self._run, name="loadertune-gpu", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.samples.append(float(torch.cuda.utilization(self.device)))
            except Exception:  # a failing NVML call ends sampling, not the trial
                return

    def stop(self) -> dict[str, float]:
        """Stop sampling; the window's GPU figures."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        figures = {
            "gpu_memory_peak_mb": torch.cuda.max_memory_allocated(self.device) / 2**20,
            "gpu_memory_reserved_mb": torch.cuda.max_memory_reserved(self.device) / 2**20,
        }
        if self.samples:
            figures["gpu_utilization_percent"] = sum(self.samples) / len(self.samples)
        return figures


def copy_figures(timer: HostCopyTimer) -> dict[str, float]:
    """Host-to-device copy speed over the timed window, where anything was copied."""
    if timer.seconds <= 0 or timer.bytes <= 0:
        return {}
    return {"h2d_mb_per_s": timer.bytes / 1e6 / timer.seconds}
