"""What the CUDA events for GPU time per phase cost on a launch-bound job.

Interleaved rounds of the 16-layer MLP from bench_hook.py: no hook, the hook with
``gpu_timing=False``, the hook with GPU timing (the default).  Prints the median
of every single step per mode and its ratio to "no hook".

    python bench/bench_hook_gpu_timing.py [--rounds 12] [--steps 300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from bench_hook import mlp

import gputui.hook


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--steps", type=int, default=300)
    args = p.parse_args()
    work = mlp(torch.device("cuda"), False, 16)
    work.block(args.steps)
    modes: dict[str, dict[str, Any] | None] = {
        "none": None,
        "hook_no_gpu_timing": {"gpu_timing": False},
        "hook_gpu_timing": {},
    }
    steps: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(args.rounds):
        for mode, options in modes.items():
            if options is not None:
                gputui.hook.install(**options)
                work.block(3)
            work.block(args.steps)
            steps[mode] += work.last_steps
            if options is not None:
                gputui.hook.uninstall()
    base = statistics.median(steps["none"])
    for mode, values in steps.items():
        med = statistics.median(values)
        print(f"{mode:<20} {med * 1e3:8.4f} ms  {med / base:.4f}")


if __name__ == "__main__":
    main()
