"""A training job whose step takes about ``--step-ms`` milliseconds: a 4-layer
MLP (width ``--width``) with AdamW, its batch size calibrated at start so that
the step comes out at the time asked.  Small steps are launch-bound on a GPU
(many small kernels), large ones compute-bound: what a capture costs differs
between the two, which is what ``bench/bench_autocapture.py`` measures.

    gputui run -- python bench/jobs/paced_train.py --step-ms 40 --seconds 120

Each step ends with ``loss.item()`` (the GPU's work is in the step's wall time).
Calibration: the batch size is scaled by the ratio of the time asked to the
median of 10 steps, up to 8 times, and kept once within 10%; it is written to
``--info FILE`` (JSON: batch, measured step ms, device) together with the pid.
The job trains through ``gputui run`` (no import of gputui) until ``--seconds``
pass or the file ``--stop-file`` appears.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--step-ms", type=float, default=40.0)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--seconds", type=float, default=120.0)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=1, help="CPU threads for a CPU job")
    p.add_argument("--info", help="write the calibration and the pid here (JSON)")
    p.add_argument("--stop-file", help="stop when this file appears")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    width = args.width
    layers: list[torch.nn.Module] = []
    for _ in range(4):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(batch: int) -> float:
        t0 = time.perf_counter()
        x = torch.randn(batch, width, device=device)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        return time.perf_counter() - t0

    target = args.step_ms / 1000.0
    batch = 64
    measured = 0.0
    for _ in range(8):
        measured = statistics.median(step(batch) for _ in range(10))
        if abs(measured - target) <= 0.1 * target:
            break
        batch = max(1, min(1 << 20, round(batch * target / measured)))
    if args.info:
        info = {
            "pid": os.getpid(),
            "batch": batch,
            "step_ms": measured * 1000,
            "device": str(device),
        }
        with open(args.info + ".tmp", "w") as fh:
            json.dump(info, fh)
        os.replace(args.info + ".tmp", args.info)
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        if args.stop_file and os.path.exists(args.stop_file):
            break
        step(batch)


if __name__ == "__main__":
    main()
