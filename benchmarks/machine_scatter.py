"""How much this machine's own speed scatters: the default model's training step (the
``small_cnn`` of ``conf/model``, a batch of 32 crops of 112 px) without any loading, timed in
windows of 20, 40 and 80 steps, interleaved, so each length sees the same moments.

The spread of one setting's repeats in a verdict cannot be smaller than this; the
coefficient of variation by window length says how much a longer ``trial.steps`` averages
out. No DataLoader, no workers: only the CPU the step gets.

    .venv/bin/python benchmarks/machine_scatter.py [--rounds 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    torch.manual_seed(0)
    x = torch.randn(32, 3, 112, 112)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, 2), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, 2), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, 2), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(64, 10),
    )  # fmt: skip
    opt = torch.optim.SGD(net.parameters(), lr=0.01)

    def step() -> None:
        opt.zero_grad()
        net(x).sum().backward()
        opt.step()

    for _ in range(5):
        step()
    print(f"load average at start: {os.getloadavg()}")
    windows: dict[int, list[float]] = {20: [], 40: [], 80: []}
    for _ in range(args.rounds):
        for n, times in windows.items():
            start = time.perf_counter()
            for _ in range(n):
                step()
            times.append((time.perf_counter() - start) / n * 1000)
    for n, times in windows.items():
        cv = statistics.stdev(times) / statistics.mean(times)
        spread = (max(times) - min(times)) / statistics.median(times)
        shown = [round(t, 1) for t in times]
        print(f"{n:3d} steps: ms/step {shown}  spread {spread:.0%}  cv {cv:.1%}")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
