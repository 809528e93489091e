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
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

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


def run(tree: str, device: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="bcs-", dir="/tmp") as tmp:
        env = dict(os.environ, GPUTUI_SOCKET_DIR=os.path.join(tmp, "s"), XDG_CACHE_HOME=tmp)
        out = subprocess.run(
            [sys.executable, "-c", JOB, str(Path(tree).resolve()), device],
            env=env,
            check=True,
            capture_output=True,
            text=True,
            timeout=300,
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree", action="append", required=True, metavar="LABEL=PATH")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--device", default="cpu", help="where the loop runs: cpu (default) or cuda")
    args = p.parse_args()
    trees = [item.split("=", 1) for item in args.tree]
    runs: dict[str, list[dict]] = {label: [] for label, _ in trees}
    for r in range(args.rounds):
        for label, path in trees if r % 2 == 0 else list(reversed(trees)):
            runs[label].append(run(path, args.device))
            print(f"round {r + 1} {label}: {json.dumps(runs[label][-1])}", file=sys.stderr)
    keys = [k for k in runs[trees[0][0]][0] if k not in ("inductor_imported", "device")]
    print(f"{'':<30}" + "".join(f"{label:>12}" for label, _ in trees))
    for k in keys:
        cells = []
        for label, _ in trees:
            vals = [run[k] for run in runs[label] if run[k] is not None]
            cells.append(f"{statistics.median(vals):>12g}" if vals else f"{'-':>12}")
        print(f"{k:<30}" + "".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
