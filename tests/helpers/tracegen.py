"""Small Chrome traces in torch.profiler's format, built by hand for tests.

Events carry what torch writes: host ops and annotations (``cpu_op``,
``user_annotation``), launch calls (``cuda_runtime``) with a correlation id,
and GPU activity (``kernel``, ``gpu_memcpy``, ``gpu_memset``) with the same
correlation id, a stream and a device.  Times are microseconds.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

GEMM = "ampere_sgemm_128x64_tn"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
H100 = {
    "id": 0,
    "name": "NVIDIA H100 80GB HBM3",
    "totalGlobalMem": 85017493504,
    "computeMajor": 9,
    "computeMinor": 0,
}


class TraceBuilder:
    def __init__(self, pid: int = 100, tid: int = 100) -> None:
        self.pid = pid
        self.tid = tid
        self.events: list[dict[str, Any]] = []
        self.correlation = 1000
        self.external = 1
        self.meta: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": [H100]}

    def _x(self, cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
        ev: dict[str, Any] = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": self.pid,
            "tid": self.tid,
            "ts": ts,
            "dur": dur,
        }
        if args:
            ev["args"] = args
        self.events.append(ev)
        return ev

    def step(self, n: int, ts: float, dur: float) -> None:
        self.external += 1
        self._x("user_annotation", f"ProfilerStep#{n}", ts, dur, **{"External id": self.external})

    def op(
        self, name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int | None = None
    ) -> int:
        self.external += 1
        ev = self._x(cat, name, ts, dur, **{"External id": self.external})
        if tid is not None:
            ev["tid"] = tid
        return self.external

    def launch(
        self,
        ts: float,
        dur: float,
        name: str,
        gpu_ts: float,
        gpu_dur: float,
        *,
        stream: int = 7,
        cat: str = "kernel",
        call: str = "cudaLaunchKernel",
        device: int = 0,
        external: int | None = None,
        call_cat: str = "cuda_runtime",
    ) -> int:
        """A launch call and the GPU activity it queued; returns the correlation.
        ``call_cat``: "cuda_driver" for the driver's API (cuLaunchKernel)."""
        corr = self.call(call, ts, dur, cat=call_cat, external=external)
        ext = self.external if external is None else external
        gpu = self._x(
            cat,
            name,
            gpu_ts,
            gpu_dur,
            **{
                "External id": ext,
                "device": device,
                "context": 1,
                "stream": stream,
                "correlation": corr,
            },
        )
        gpu["pid"] = device
        gpu["tid"] = stream
        # the flow events torch writes beside every launch (no duration: skipped)
        self.events.append(
            {
                "ph": "s",
                "id": corr,
                "pid": self.pid,
                "tid": self.tid,
                "ts": ts,
                "cat": "ac2g",
                "name": "ac2g",
            }
        )
        self.events.append(
            {
                "ph": "f",
                "id": corr,
                "pid": device,
                "tid": stream,
                "ts": gpu_ts,
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            }
        )
        return corr

    def call(
        self,
        name: str,
        ts: float,
        dur: float,
        *,
        cat: str = "cuda_runtime",
        external: int | None = None,
    ) -> int:
        """A runtime call with its correlation id and no GPU activity (cudaMalloc,
        cudaStreamSynchronize, or a launch whose kernel was not recorded);
        returns the correlation."""
        self.correlation += 1
        ext = self.external if external is None else external
        self._x(
            cat, name, ts, dur, **{"External id": ext, "cbid": 211, "correlation": self.correlation}
        )
        return self.correlation

    def document(self) -> dict[str, Any]:
        doc = dict(self.meta)
        doc["traceEvents"] = [
            {
                "name": "process_name",
                "ph": "M",
                "ts": 0,
                "pid": self.pid,
                "tid": 0,
                "args": {"name": "python3"},
            },
            *self.events,
            {
                "ph": "X",
                "cat": "Trace",
                "ts": 0,
                "dur": 1e6,
                "pid": "Spans",
                "tid": "PyTorch Profiler",
                "name": "PyTorch Profiler (0)",
                "args": {"Op count": 0},
            },
        ]
        doc["traceName"] = "synthetic"
        return doc

    def write(self, path: Path, compress: bool | None = None) -> Path:
        text = json.dumps(self.document(), indent=1)
        if compress is None:
            compress = path.name.endswith(".gz")
        if compress:
            with gzip.open(path, "wt") as fh:
                fh.write(text)
        else:
            path.write_text(text)
        return path


def reference_trace() -> TraceBuilder:
    """The trace whose metrics tests/test_trace_metrics.py computes by hand.

    Three steps of 100 µs.  Stream 7 runs a GEMM [20, 50), an add [52, 60), a
    memcpy [80, 90), a GEMM [120, 140), an add [180, 190) and, in the last step,
    a GEMM [220, 230); stream 8 an all-reduce [125, 145).  Host ops ``aten::mm``
    [5, 30) and [105, 125)."""
    t = TraceBuilder()
    for n in (1, 2, 3):
        t.step(n, (n - 1) * 100.0, 100.0)
    t.op("aten::mm", 5.0, 25.0)
    t.launch(10.0, 5.0, GEMM, 20.0, 30.0)
    t.launch(12.0, 5.0, ADD, 52.0, 8.0)
    t.launch(
        70.0,
        5.0,
        "Memcpy HtoD (Pageable -> Device)",
        80.0,
        10.0,
        cat="gpu_memcpy",
        call="cudaMemcpyAsync",
    )
    t.op("aten::mm", 105.0, 20.0)
    t.launch(110.0, 5.0, GEMM, 120.0, 20.0)
    t.launch(111.0, 5.0, NCCL, 125.0, 20.0, stream=8)
    t.launch(115.0, 5.0, ADD, 180.0, 10.0)
    t.launch(210.0, 5.0, GEMM, 220.0, 10.0)
    return t
