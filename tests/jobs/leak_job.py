"""A small training job with a planted leak, for the memory snapshot tests.

Each step keeps a slice of its first layer's activations in a list (the line
marked ``planted leak``), so one allocation site grows by ``--leak-kb`` per
step; everything else is freed within the step.  Runs on CUDA (the point) or
on the CPU (where memory snapshots are refused).

--ready-file F  written with the pid once training has started
--steps N       train N steps, then exit (0: until killed)
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

KEPT: list[torch.Tensor] = []


def keep(h: torch.Tensor, leak_bytes: int) -> None:
    rows = max(1, leak_bytes // (h.shape[1] * h.element_size()))
    KEPT.append(h[:rows].detach().clone())  # planted leak


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--leak-kb", type=int, default=256)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--step-sleep", type=float, default=0.002, help="host work per step (s)")
    p.add_argument("--ready-file")
    args = p.parse_args()
    device = torch.device(args.device)
    model = torch.nn.Sequential(
        torch.nn.Linear(args.width, args.width), torch.nn.ReLU(), torch.nn.Linear(args.width, 1)
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, args.width, device=device)
    y = torch.randn(256, 1, device=device)
    done = 0
    while args.steps <= 0 or done < args.steps:
        time.sleep(args.step_sleep)
        h = model[0](x)
        keep(h, args.leak_kb * 1024)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        done += 1
        if done == 1 and args.ready_file:
            with open(args.ready_file + ".tmp", "w") as fh:
                fh.write(str(os.getpid()))
            os.replace(args.ready_file + ".tmp", args.ready_file)
        if len(KEPT) > 20_000:  # a bound for a job left running
            KEPT.clear()
    return 0


if __name__ == "__main__":
    sys.exit(main())
