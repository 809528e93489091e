"""CPU time of single NVML queries on GPU 0, as the live monitor makes them.

    python bench/nvml_calls.py [--rounds 12] [--gap 1.0] [--out FILE]

Each round calls every query once, in turn, ``--gap`` seconds apart (the per-process
utilization returns the samples since the previous read, as the collector asks
for them), and counts each call's CPU time (``time.thread_time``): the driver's
work in this process, which is what the monitor's CPU figure holds.  The
per-process utilization is read two ways: pynvml's wrapper (a call for the
count, then a call with an array) and one call with an array of 64 samples.
Medians and ranges in microseconds, JSON on standard output.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def util_one_call(nv: Any, handle: Any, since: int, capacity: int = 64) -> int:
    """Samples since ``since`` from one call with an array of ``capacity``
    (again with a larger one only when NVML says it is too small)."""
    fn = nv._nvmlGetFunctionPointer("nvmlDeviceGetProcessUtilization")
    sample = nv.c_nvmlProcessUtilizationSample_t
    while True:
        count = ctypes.c_uint(capacity)
        array = (sample * capacity)()
        ret = fn(handle, array, ctypes.byref(count), ctypes.c_ulonglong(since))
        if ret == nv.NVML_ERROR_INSUFFICIENT_SIZE:
            capacity = count.value * 2 + 5
            continue
        if ret == nv.NVML_ERROR_NOT_FOUND:
            return 0
        if ret != nv.NVML_SUCCESS:
            raise nv.NVMLError(ret)
        return int(count.value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--gap", type=float, default=1.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    import pynvml as nv

    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    since = {"util_pynvml": 0, "util_one_call": 0}

    def util_pynvml() -> int:
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(h, since["util_pynvml"])
        except nv.NVMLError:
            return 0
        if samples:
            since["util_pynvml"] = max(int(s.timeStamp) for s in samples)
        return len(samples)

    def util_one() -> int:
        return util_one_call(nv, h, since["util_one_call"])

    queries: dict[str, Callable[[], Any]] = {
        "process_util_pynvml": util_pynvml,
        "process_util_one_call": util_one,
        "energy": lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h),
        "bar1": lambda: nv.nvmlDeviceGetBAR1MemoryInfo(h),
        "pcie_width": lambda: nv.nvmlDeviceGetCurrPcieLinkWidth(h),
        "pcie_gen": lambda: nv.nvmlDeviceGetCurrPcieLinkGeneration(h),
        "memory_v2": lambda: nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2),
        "utilization": lambda: nv.nvmlDeviceGetUtilizationRates(h),
        "power": lambda: nv.nvmlDeviceGetPowerUsage(h),
        "temperature": lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
        "clock_sm": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
        "compute_procs": lambda: nv.nvmlDeviceGetComputeRunningProcesses_v3(h),
    }
    times: dict[str, list[float]] = {name: [] for name in queries}
    counts: dict[str, list[int]] = {"process_util_pynvml": [], "process_util_one_call": []}
    for name in queries:  # a first call of each, not counted
        queries[name]()
    for _ in range(args.rounds):
        for name, query in queries.items():
            if name.startswith("process_util"):
                time.sleep(args.gap)
            start = time.thread_time()
            result = query()
            times[name].append((time.thread_time() - start) * 1e6)
            if name in counts:
                counts[name].append(int(result))
    nv.nvmlShutdown()
    out = {
        "rounds": args.rounds,
        "gap_s": args.gap,
        "us": {
            name: {
                "median": round(statistics.median(v), 1),
                "min": round(min(v), 1),
                "max": round(max(v), 1),
            }
            for name, v in times.items()
        },
        "process_util_samples": counts,
    }
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
