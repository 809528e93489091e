"""What reading the roofline's op rows from a finished capture costs, beside what
the hook already pays to reduce the same events to its kernel and op tables.

A CPU training loop (a small MLP with Adam) is captured with ``record_shapes``
and ``with_flops`` until the capture holds about ``--events`` raw events; then
``reduce_events`` (the hook's tables) and ``rows_from_kineto`` (the roofline
rows) each run ``--rounds`` times on those events.  Prints the median of each
and their ratio.  Runs without a GPU (no kernels: the op side is the costly one).

    python bench/bench_op_rows.py [--events 50000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gputui.hook._reduce import reduce_events
from gputui.trace.op_rows import rows_from_kineto


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=50_000)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(8)])
    opt = torch.optim.Adam(model.parameters(), foreach=False)
    x = torch.randn(32, 64)
    acts = [torch.profiler.ProfilerActivity.CPU]

    def capture(steps: int) -> list[object]:
        with torch.profiler.profile(activities=acts, record_shapes=True, with_flops=True) as prof:
            for _ in range(steps):
                model(x).square().mean().backward()
                opt.step()
                opt.zero_grad()
        return list(prof.profiler.kineto_results.events())

    per_step = len(capture(4)) / 4  # the events are only readable once it stops
    steps = max(1, round(args.events / per_step))
    events = capture(steps)
    reduce_s, rows_s = [], []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        reduce_events(events)
        t1 = time.perf_counter()
        rows = rows_from_kineto(events)
        t2 = time.perf_counter()
        reduce_s.append(t1 - t0)
        rows_s.append(t2 - t1)
    r, o = statistics.median(reduce_s), statistics.median(rows_s)
    print(f"torch {torch.__version__}, {len(events)} events, {steps} steps, {len(rows)} op rows")
    print(f"reduce_events     median {r * 1000:7.1f} ms")
    print(f"rows_from_kineto  median {o * 1000:7.1f} ms   ratio {o / r:.2f}")


if __name__ == "__main__":
    main()
