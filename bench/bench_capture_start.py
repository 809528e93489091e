"""What the first capture in a job costs its loop before the profiler records:
each tree's hook in a fresh CPU process (torch installed, no GPU needed) that
runs an inference loop (a training step's optimizer imports ``torch._inductor``
itself), a capture armed after some steps, the step times around it.

    python bench/bench_capture_start.py --tree before=/tmp/base --tree after=. --rounds 3

``--device cuda`` runs the loop on the GPU (each step synchronized).

torch.profiler's start imports ``torch._inductor`` where the job has not (seconds);
the figures say where that time went: the longest step between the arming and
the capture's first recorded step (the stall the loop saw), the steps run
meanwhile, and the wall time from the arming to the recording.  Each round
runs every tree once, alternating which goes first; medians over rounds.
"""

from __future__ import annotations

import argparse
import sys

from tree_rounds import compare

JOB = r"""
import json, os, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
import torch
import gputui.hook
from gputui.protocol.schema import CaptureRequest

dev = sys.argv[2]
hook = gputui.hook.install()
layers = [torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)]
model = torch.nn.Sequential(*layers).to(dev)
x = torch.randn(64, 256, device=dev)
times, armed_at, recording_at = [], None, None
for i in range(100000):
    t0 = time.perf_counter()
    with torch.no_grad():
        model(x).argmax(1)
    if dev != "cpu":
        torch.cuda.synchronize()
    gputui.hook.step()
    t1 = time.perf_counter()
    times.append((t0, t1))
    if i == 200:
        armed_at = t1
        hook.capture.request(None, CaptureRequest(id="bench", steps=3, warmup=1))
    if armed_at is not None and recording_at is None and hook.capture.state == "recording":
        recording_at = t1
    if recording_at is not None and t1 - recording_at > 1.0:
        break
    if armed_at is not None and t1 - armed_at > 120:
        break
before = [b - a for a, b in times if b <= (armed_at or 0)][-100:]
during = [b - a for a, b in times if armed_at is not None and b > armed_at
          and (recording_at is None or b <= recording_at)]
print(json.dumps({
    "step_ms_median_before": round(1000 * sorted(before)[len(before) // 2], 3),
    "longest_step_ms_while_armed": round(1000 * max(during), 1) if during else None,
    "steps_while_armed": len(during),
    "arm_to_recording_s": None if recording_at is None else round(recording_at - armed_at, 2),
    "inductor_imported": "torch._inductor" in sys.modules,
    "device": str(dev),
}))
gputui.hook.uninstall()
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree", action="append", required=True, metavar="LABEL=PATH")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--device", default="cpu", help="where the loop runs: cpu (default) or cuda")
    args = p.parse_args()
    compare(args.tree, args.rounds, JOB, args.device, skip=("inductor_imported", "device"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
