"""A real profiler trace of a training job, with shapes and Python stacks: a
GPT-2 (12 layers, built from its config: nothing is downloaded) trained in bf16
autocast with AdamW, profiled by ``torch.profiler`` with ``record_shapes=True``
and ``with_stack=True`` for ACTIVE steps after one warm-up step, exported with
``export_chrome_trace``.  What ``gputui analyze`` meets when a user profiles a
few hundred steps of a transformer.

    python3 bench/jobs/big_trace.py ACTIVE OUT.pt.trace.json [BATCH] [SEQ]

Prints one JSON line: the steps, the file's size, how long the steps and the
export took.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch


def main() -> int:
    active = int(sys.argv[1])
    out = sys.argv[2]
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    seq = int(sys.argv[4]) if len(sys.argv) > 4 else 256
    from analyzer_cases import gpt2_step  # (this script's folder is on the path)

    step = gpt2_step(12, 50257, batch, seq)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    exported: list[float] = []

    def export(prof: torch.profiler.profile) -> None:
        t = time.perf_counter()
        prof.export_chrome_trace(out)
        exported.append(time.perf_counter() - t)

    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    t0 = time.perf_counter()
    with torch.profiler.profile(
        activities=acts,
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=active, repeat=1),
        on_trace_ready=export,
        record_shapes=True,
        with_stack=True,
    ) as prof:
        for _ in range(active + 1):
            step()
            prof.step()
    took = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "active_steps": active,
                "batch": batch,
                "seq": seq,
                "bytes": os.path.getsize(out),
                "profiled_s": round(took, 1),
                "export_s": round(exported[0], 1) if exported else None,
                "torch": torch.__version__,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
