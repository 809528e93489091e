"""Does the roofline's achieved TFLOP/s for a matrix product, read from a
torch.profiler capture, agree with CUDA events timing the same product in the
same run?

For each case (dtype, n): a capture (``record_shapes``, ``with_flops``) of
``calls`` warm, back-to-back ``torch.mm`` calls with CUDA events around every one
of them, so that both measure the very same calls (a sustained matmul's clocks
drift with power and temperature: rounds at other times would differ by more
than the 5% asked).  The capture is read two ways: the raw events
(``rows_from_kineto``, what the hook reads) and the exported Chrome trace
(``rows_from_chrome_trace``, what ``gputui analyze`` reads).  Prints both with
their ratio to the events' median and exits 1 if either differs by more than 5%.
The events' median over rounds before and after the capture is printed too.

    python bench/bench_roofline_agreement.py [--calls 20] [--tolerance 0.05]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gputui.trace.op_rows import OpRow, rows_from_chrome_trace, rows_from_kineto

CASES = (("bfloat16", 8192), ("float16", 4096), ("float32", 4096))


def event_times_ms(torch: Any, a: Any, b: Any, calls: int) -> list[float]:
    pairs = []
    for _ in range(calls):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        torch.mm(a, b)
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in pairs]


def mm_row(rows: list[OpRow], n: int) -> OpRow | None:
    for r in rows:
        if r.name == "aten::mm" and r.input_dims[:2] == ((n, n), (n, n)):
            return r
    return None


def run_case(torch: Any, dtype_name: str, n: int, calls: int, tol: float) -> bool:
    dtype = getattr(torch, dtype_name)
    a = torch.randn(n, n, device="cuda").to(dtype)
    b = torch.randn(n, n, device="cuda").to(dtype)
    flops = 2.0 * n**3
    warm_until = time.perf_counter() + 1.0  # reach sustained clocks before timing
    while time.perf_counter() < warm_until:
        event_times_ms(torch, a, b, 5)
    before = event_times_ms(torch, a, b, calls)
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts, record_shapes=True, with_flops=True) as prof:
        during = event_times_ms(torch, a, b, calls)  # the captured calls themselves
    after = event_times_ms(torch, a, b, calls)
    outside = before + after
    med = statistics.median(outside)
    # the median: the first captured call also waits for the profiler's start
    mid = statistics.median(during)
    events_tflops = flops / (mid / 1e3) / 1e12
    print(
        f"{dtype_name} {n}x{n} @ {n}x{n}, {calls} calls per round\n"
        f"  CUDA events    median {mid:.4f} ms/call [{min(during):.4f}-{max(during):.4f}] "
        f"-> {events_tflops:7.1f} TFLOP/s (the captured calls)\n"
        f"  CUDA events    median {med:.4f} ms/call [{min(outside):.4f}-{max(outside):.4f}] "
        f"-> {flops / (med / 1e3) / 1e12:7.1f} TFLOP/s (rounds before and after)"
    )
    raw = mm_row(rows_from_kineto(prof.profiler.kineto_results.events()), n)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        traced = mm_row(rows_from_chrome_trace(json.loads(path.read_text())), n)
    ok = True
    for label, row in (("raw events", raw), ("Chrome trace", traced)):
        if row is None or not row.flops or row.device_us <= 0:
            print(f"  {label:<14} no aten::mm row with FLOPs and GPU time: FAIL")
            ok = False
            continue
        tflops = row.flops / (row.device_us / 1e6) / 1e12
        ratio = tflops / events_tflops
        good = abs(ratio - 1.0) <= tol
        ok = ok and good and row.flops == calls * flops
        print(
            f"  {label:<14} mean   {row.device_us / row.calls / 1e3:.4f} ms/call "
            f"({row.calls} calls, {row.kernels} kernels, FLOPs {row.flops_source}) "
            f"-> {tflops:7.1f} TFLOP/s  ratio {ratio:.4f} {'ok' if good else 'FAIL'}"
        )
    del a, b, prof
    torch.cuda.empty_cache()
    return ok


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--tolerance", type=float, default=0.05)
    args = p.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to compare", file=sys.stderr)
        return 2
    print(f"GPU {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    results = [run_case(torch, dt, n, args.calls, args.tolerance) for dt, n in CASES]
    print("PASS: every ratio within" if all(results) else "FAIL: a ratio is outside", end="")
    print(f" {args.tolerance:.0%}")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
