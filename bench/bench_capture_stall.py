"""What processing a capture costs the training loop that runs beside it: each
tree's hook in a fresh process that runs a training loop (a deep narrow MLP,
forward, backward and AdamW: many small ops, each of which gives the GIL away
inside torch), a capture armed after some steps, and the steps that run while
the hook's worker reduces the capture and writes its trace.

    python bench/bench_capture_stall.py --tree before=/tmp/base --tree after=. --rounds 3
    python bench/bench_capture_stall.py --tree after=. --width 8
    python bench/bench_capture_stall.py --tree after=. --device cuda

The figures: the median step before the capture; the steps that ran while it
was processed (from the profiler's stop to the result), the longest of them and
their time beyond as many median steps (the loop's loss); the worker's reduce,
op-row and export times and the result's delay (``ready_after_ms``).  Each
round runs every tree once, alternating which goes first; medians over rounds.
"""

from __future__ import annotations

import argparse
import sys

from tree_rounds import compare

JOB = r"""
import json, os, statistics, sys, time
sys.path.insert(0, sys.argv[1])
import torch
import gputui.hook
from gputui.protocol.schema import CaptureRequest

dev, width = sys.argv[2], int(sys.argv[3])
hook = gputui.hook.install()
torch.manual_seed(0)
model = torch.nn.Sequential(
    *[m for _ in range(24) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())]
).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(32, width, device=dev)
times, armed_at, stopped_at, ready_at, count = [], None, None, None, hook.capture.count
for i in range(200000):
    t0 = time.perf_counter()
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    gputui.hook.step()
    t1 = time.perf_counter()
    state = hook.capture.state
    times.append((t0, t1, state))
    if i == 300:
        armed_at = t1
        hook.capture.request(None, CaptureRequest(id="bench", steps=5, warmup=1))
    if armed_at is not None and stopped_at is None and state == "processing":
        stopped_at = t0  # the step in which the profiler stopped ended the recording
    if stopped_at is not None and ready_at is None and hook.capture.count > count:
        ready_at = t1
    if ready_at is not None and t1 - ready_at > 1.0:
        break
    if armed_at is not None and t1 - armed_at > 300:
        break
median = statistics.median(b - a for a, b, _ in times if b <= armed_at)
processing = [b - a for a, b, s in times if stopped_at is not None and a >= stopped_at
              and (ready_at is None or a < ready_at)]
result = hook.capture.last_result or {}
print(json.dumps({
    "step_ms_median_before": round(1000 * median, 3),
    "steps_while_processing": len(processing),
    "longest_step_ms_while_processing": round(1000 * max(processing), 1) if processing else None,
    "loss_ms_while_processing": round(1000 * sum(max(0.0, p - median) for p in processing), 1),
    "reduce_ms": result.get("reduce_ms"),
    "op_rows_ms": result.get("op_rows_ms"),
    "export_ms": result.get("export_ms"),
    "ready_after_ms": result.get("ready_after_ms"),
    "events": result.get("events"),
    "device": str(dev),
}))
gputui.hook.uninstall()
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree", action="append", required=True, metavar="LABEL=PATH")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--device", default="cpu", help="where the loop runs: cpu (default) or cuda")
    p.add_argument(
        "--width",
        type=int,
        default=128,
        help="the MLP's width (8 on the CPU: ops of a few microseconds, each giving the "
        "GIL away, as a GPU job's launches do)",
    )
    args = p.parse_args()
    compare(args.tree, args.rounds, JOB, args.device, str(args.width), skip=("device",))
    return 0


if __name__ == "__main__":
    sys.exit(main())
