"""How short can the interval between two GPM samples be?  (GPU machine, Hopper+)

For an idle GPU, a memory-bound loop and a bf16 matrix-product loop (each from
``bench/jobs/gpu_load.py``), takes two ``nvmlGpmSampleGet`` readings WINDOW apart,
seven times per window, and prints the median and range of SM activity, SM
occupancy, tensor activity and DRAM bandwidth utilization, and how many readings
came back as an error or NaN.  A window that reads the same as 1 s is long enough.

    python bench/bench_gpm_window.py
"""

from __future__ import annotations

import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pynvml as nv

JOB = Path(__file__).resolve().parent / "jobs" / "gpu_load.py"
WINDOWS_S = (0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.25, 1.0)
REPEATS = 7


def main() -> int:
    nv.nvmlInit()
    handle = nv.nvmlDeviceGetHandleByIndex(0)
    metrics = {
        "sm": nv.NVML_GPM_METRIC_SM_UTIL,
        "occ": nv.NVML_GPM_METRIC_SM_OCCUPANCY,
        "tensor": nv.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
        "dram": nv.NVML_GPM_METRIC_DRAM_BW_UTIL,
    }
    first, second = nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()

    def reading(window_s: float) -> dict[str, float | None]:
        nv.nvmlGpmSampleGet(handle, first)
        time.sleep(window_s)
        nv.nvmlGpmSampleGet(handle, second)
        request = nv.c_nvmlGpmMetricsGet_t()
        request.version = nv.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(metrics)
        for i, metric in enumerate(metrics.values()):
            request.metrics[i].metricId = metric
        request.sample1, request.sample2 = first, second
        nv.nvmlGpmMetricsGet(request)
        out: dict[str, float | None] = {}
        for i, name in enumerate(metrics):
            value = request.metrics[i].value
            ok = request.metrics[i].nvmlReturn == 0 and math.isfinite(value)
            out[name] = float(value) if ok else None
        return out

    for phase in ("idle", "elementwise", "bf16mm"):
        job = None
        if phase != "idle":
            job = subprocess.Popen(
                [sys.executable, str(JOB), "--plan", f"{phase}:120"], stdout=subprocess.DEVNULL
            )
            time.sleep(8)  # CUDA start-up and the first kernels
        try:
            for window in WINDOWS_S:
                rows = [reading(window) for _ in range(REPEATS)]
                parts = []
                for name in metrics:
                    values = [r[name] for r in rows if r[name] is not None]
                    bad = REPEATS - len(values)
                    if values:
                        part = (
                            f"{name} {statistics.median(values):5.1f} "
                            f"[{min(values):5.1f}-{max(values):5.1f}]"
                        )
                    else:
                        part = f"{name}   --            "
                    parts.append(part + (f" ({bad} bad)" if bad else ""))
                print(f"{phase:11s} {window * 1000:6.0f} ms  " + "  ".join(parts), flush=True)
        finally:
            if job is not None:
                job.kill()
                job.wait()
    nv.nvmlGpmSampleFree(first)
    nv.nvmlGpmSampleFree(second)
    nv.nvmlShutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
