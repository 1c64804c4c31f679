"""Everything that needs a CUDA device, in one run of under five minutes, with one summary.

The CUDA tests; one CUDA trial of the default workload; a two-trial CUDA sweep; AutoLoader
on CUDA with pin_memory probed (every index delivered once); ``benchmarks/pin_memory_cuda.py``
once. Each check has a time limit and one summary line (PASS/FAIL, seconds, what it showed);
the exit status is 1 if any failed. Without a CUDA device it says so and exits 0: there is
nothing to check (``make gpu-check`` on a CPU machine).

    .venv/bin/python scripts/gpu_check.py      # or: make gpu-check
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CUDA_TESTS = [
    "tests/measure/test_accelerator.py",
    "tests/autoloader/test_loader.py::test_pin_memory_is_probed_on_cuda",
    "tests/e2e/test_experiments.py::test_tokens_gpu_preset",
    "tests/ranks/test_ranks.py::test_two_ranks_on_two_gpus_train_with_nccl",
    "tests/checks/test_ranks_budget.py::test_more_ranks_than_visible_gpus_is_refused_on_cuda",
]
AUTOLOADER = """
import torch
from torch.utils.data import Dataset
from loadertune import AutoLoader
class Images(Dataset):
    def __len__(self): return 512
    def __getitem__(self, i): return torch.full((3, 64, 64), float(i))
auto = AutoLoader(Images(), batch_size=16, tune_steps=24, device="cuda")
seen = []
for batch in auto:
    seen += batch.to("cuda", non_blocking=True)[:, 0, 0, 0].long().tolist()
assert sorted(seen) == list(range(512)), "an index lost or repeated"
print("settled", auto.settings["num_workers"], "workers, pin_memory", auto.settings["pin_memory"])
"""


def _run(name: str, argv: list[str], limit_s: int, cwd: Path) -> tuple[str, bool, float, str]:
    """Run one check; (name, passed, seconds, its last output line)."""
    start = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=limit_s, cwd=cwd)
        ok, text = done.returncode == 0, (done.stdout + done.stderr).strip()
    except subprocess.TimeoutExpired:
        ok, text = False, f"over its {limit_s} s limit"
    last = text.splitlines()[-1] if text else ""
    return name, ok, time.monotonic() - start, last[:150]


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print(f"gpu-check: no CUDA device (torch {torch.__version__}): nothing to check")
        return 0
    device = torch.cuda.get_device_name(0)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        trial = [str(BIN / "loadertune"), "trial.device=cuda", f"paths.output_root={out}/trial"]
        sweep = [
            str(BIN / "loadertune"), "-m", "trial.device=cuda", f"paths.output_root={out}/sweep",
            "hydra.sweeper.n_trials=2", "hydra.sweeper.verdict_repeats=0",
        ]  # fmt: skip
        tests = [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", *CUDA_TESTS]
        bench = [sys.executable, "benchmarks/pin_memory_cuda.py", "--repeats", "1"]
        checks = [
            _run("CUDA tests", tests, 150, ROOT),
            _run("one CUDA trial", trial, 60, out),
            _run("two-trial CUDA sweep", sweep, 120, out),
            _run("AutoLoader on CUDA", [sys.executable, "-c", AUTOLOADER], 60, out),
            _run("pin_memory benchmark", bench, 120, ROOT),
        ]
    print(f"gpu-check on {device} (torch {torch.__version__}, CUDA {torch.version.cuda}):")
    for name, ok, seconds, last in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {name:22} {seconds:6.1f} s  {last}")
    failed = [name for name, ok, _, _ in checks if not ok]
    print(f"gpu-check: {len(checks) - len(failed)} of {len(checks)} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
