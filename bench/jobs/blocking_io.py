"""A small CUDA training job whose step also does host work outside torch, for
``gputui run`` and ``gputui attach`` (docs/analyzer.md, "Python that waits"):

    python bench/jobs/blocking_io.py MODE SECONDS

MODE ``fsync``: each step writes 1 MiB of metrics to a file and fsyncs it (a
blocking write, off the CPU); ``python``: each step computes in pure Python
for about as long (on the CPU); ``sleep``: each step sleeps 8 ms.  The job runs
for SECONDS and prints its mean step time.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import torch
from torch import nn


def write_metrics(path: str, payload: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(payload)
        fh.flush()
        os.fsync(fh.fileno())


def python_metrics(n: int) -> int:
    total = 0
    for i in range(n):
        total += (i * i) % 7
    return total


def main() -> int:
    mode, seconds = sys.argv[1], float(sys.argv[2])
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(256, 1024, device=dev)
    payload = os.urandom(1 << 20)
    fd, path = tempfile.mkstemp(prefix="gputui-metrics-")
    os.close(fd)
    steps, t0 = 0, time.perf_counter()
    try:
        while time.perf_counter() - t0 < seconds:
            opt.zero_grad(set_to_none=True)
            model(x).square().mean().backward()
            opt.step()
            if mode == "fsync":
                write_metrics(path, payload)
            elif mode == "python":
                python_metrics(150_000)
            else:
                time.sleep(0.008)
            steps += 1
    finally:
        os.unlink(path)
    if dev == "cuda":
        torch.cuda.synchronize()
    print(f"blocking_io {mode}: {(time.perf_counter() - t0) / max(1, steps) * 1000:.2f} ms a step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
