"""How much a profiler slows a job's step: the mean step unprofiled, under
torch.profiler (CPU + CUDA), and with input shapes and FLOPs recorded too.

    python bench/jobs/profiler_cost.py CASE [CASE ...]     (cases of analyzer_cases.py)

Each mode runs the case's step for 20 steps after 5 warm-up steps, the GPU
synchronized before and after the timed steps; prints one JSON line per case.
The analyzer takes the profiler's own cost out of profiled traces with these
ratios (``idle.profiler_slowdown``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import analyzer_cases as cases

STEPS, WARMUP = 20, 5


def timed(step: Any, profiler: Any | None) -> float:
    for _ in range(WARMUP):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(STEPS):
        step()
        if profiler is not None:
            profiler.step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / STEPS


def main() -> None:
    for name in sys.argv[1:]:
        captured: dict[str, Any] = {}

        def grab(
            _out: Path, _name: str, step: Any, steps: int = 0, into: dict[str, Any] = captured
        ) -> Path:
            into["step"] = step
            return Path("/dev/null")

        cases.profiled = grab  # type: ignore[assignment]
        cases.CASES[name](Path("/tmp"))
        step = captured["step"]
        row: dict[str, Any] = {"case": name, "unprofiled_ms": timed(step, None) * 1e3}
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        for label, shapes in (("profiled_ms", False), ("shapes_flops_ms", True)):
            with torch.profiler.profile(
                activities=acts, record_shapes=shapes, with_flops=shapes
            ) as prof:
                row[label] = timed(step, prof) * 1e3
        row["slowdown"] = row["profiled_ms"] / row["unprofiled_ms"]
        row["slowdown_shapes"] = row["shapes_flops_ms"] / row["unprofiled_ms"]
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}))
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
