"""Reduce raw profiler events to the tables a viewer shows (runs off the training
thread, in the job).

Input is ``prof.profiler.kineto_results.events()`` -- summing by name from raw
events takes ~0.2 s on 50-70k events where ``key_averages()`` takes 4-7 s.
GPU user-annotation ranges (``ProfilerStep#N``, ``Optimizer.step#Adam.step``,
``record_function`` names mirrored on the GPU timeline) span many kernels; they
are left out of the kernel table, busy time and class totals.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from gputui.analysis.kernels import COMMUNICATION, COMPUTE, MEMCPY, MEMSET, coarse_of, kernel_class
from gputui.protocol.capture import CpuOpRow, GpuTime, KernelRow

TOP_ROWS = 30
MAX_NAME = 600

_GPU_KEEP = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "concurrent_kernel"})
_CPU_SKIP = frozenset(
    {"user_annotation", "gpu_user_annotation", "python_function", "overhead", "cpu_instant_event"}
)
_ANNOTATION_NAME = re.compile(r"^(ProfilerStep#\d+|Optimizer\.(step|zero_grad)#|## )")


def _call(ev: Any, name: str, default: Any = None) -> Any:
    fn = getattr(ev, name, None)
    if fn is None:
        return default
    try:
        return fn()
    except Exception:
        return default


def _device_kind(ev: Any) -> str:
    dt = _call(ev, "device_type")
    name = getattr(dt, "name", None) or str(dt)
    return name.rsplit(".", 1)[-1].upper()


def extract(
    events: Iterable[Any],
) -> tuple[list[tuple[int, int, int, str, bool]], list[tuple[int, int, int, str]], int]:
    """Split raw events into CPU records ``(thread, start_ns, end_ns, name, is_op)``
    and GPU activity records ``(device, start_ns, end_ns, name)``; also the total
    number of events seen."""
    cpu: list[tuple[int, int, int, str, bool]] = []
    gpu_raw: list[tuple[int, int, int, str, str, bool]] = []
    annotation_names: set[str] = set()
    total = 0
    for ev in events:
        total += 1
        name = _call(ev, "name", "") or ""
        start = int(_call(ev, "start_ns", 0) or 0)
        dur = int(_call(ev, "duration_ns", 0) or 0)
        activity = str(_call(ev, "activity_type", "") or "")
        user_ann = bool(_call(ev, "is_user_annotation", False))
        kind = _device_kind(ev)
        if kind == "CPU":
            if user_ann or activity == "user_annotation":
                annotation_names.add(name)
            is_op = not user_ann and activity not in _CPU_SKIP
            if is_op and _call(ev, "is_python_function", False):
                is_op = False
            tid = int(_call(ev, "start_thread_id", 0) or 0)
            cpu.append((tid, start, start + dur, name, is_op))
        else:
            device = int(_call(ev, "device_index", 0) or 0)
            gpu_raw.append((device, start, start + dur, name, activity, user_ann))
    gpu: list[tuple[int, int, int, str]] = []
    for device, start, end, name, activity, user_ann in gpu_raw:
        if activity:
            if activity not in _GPU_KEEP:
                continue
        elif user_ann or name in annotation_names or _ANNOTATION_NAME.match(name):
            continue
        gpu.append((device, start, end, name))
    return cpu, gpu, total


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _length(merged: list[tuple[int, int]]) -> int:
    return sum(end - start for start, end in merged)


def _intersection(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    i = j = total = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _us(ns: float) -> float:
    return round(ns / 1000.0, 3)


def kernel_table(gpu: list[tuple[int, int, int, str]], top: int = TOP_ROWS) -> dict[str, Any]:
    """Top GPU activities by total time, totals per class, and union-based GPU time
    split (HTA definitions: idle = span - union of all activity)."""
    per_name: dict[str, list[int]] = {}  # name -> [calls, total, min, max]
    device_time: dict[int, int] = {}
    for device, start, end, name in gpu:
        dur = end - start
        device_time[device] = device_time.get(device, 0) + dur
        row = per_name.get(name)
        if row is None:
            per_name[name] = [1, dur, dur, dur]
        else:
            row[0] += 1
            row[1] += dur
            if dur < row[2]:
                row[2] = dur
            if dur > row[3]:
                row[3] = dur
    grand = sum(row[1] for row in per_name.values())
    by_class: dict[str, float] = {}
    classes: dict[str, str] = {}
    for name, row in per_name.items():
        cls = kernel_class(name)
        classes[name] = cls
        by_class[cls] = by_class.get(cls, 0) + row[1]
    rows = sorted(per_name.items(), key=lambda item: item[1][1], reverse=True)
    table = tuple(
        KernelRow(
            name=name[:MAX_NAME],
            kernel_class=classes[name],
            calls=row[0],
            total_us=_us(row[1]),
            mean_us=_us(row[1] / row[0]),
            min_us=_us(row[2]),
            max_us=_us(row[3]),
            share=round(row[1] / grand, 6) if grand else 0.0,
        )
        for name, row in rows[:top]
    )
    gpu_time: GpuTime | None = None
    if device_time:
        # One device per process is the norm; with several, report the busiest.
        device = max(device_time, key=lambda d: device_time[d])
        spans: dict[str, list[tuple[int, int]]] = {
            COMPUTE: [],
            COMMUNICATION: [],
            MEMCPY: [],
            MEMSET: [],
        }
        every: list[tuple[int, int]] = []
        for dev, start, end, name in gpu:
            if dev != device:
                continue
            spans[coarse_of(classes[name])].append((start, end))
            every.append((start, end))
        merged = _union(every)
        span = merged[-1][1] - merged[0][0] if merged else 0
        busy = _length(merged)
        unions = {cls: _union(iv) for cls, iv in spans.items()}
        comm = _length(unions[COMMUNICATION])
        gpu_time = GpuTime(
            device=device,
            span_us=_us(span),
            busy_us=_us(busy),
            idle_us=_us(span - busy),
            compute_us=_us(_length(unions[COMPUTE])),
            communication_us=_us(comm),
            memcpy_us=_us(_length(unions[MEMCPY])),
            memset_us=_us(_length(unions[MEMSET])),
            comm_compute_overlap=(
                round(_intersection(unions[COMMUNICATION], unions[COMPUTE]) / comm, 6)
                if comm
                else None
            ),
        )
    return {
        "kernels": table,
        "kernel_names": len(per_name),
        "kernel_calls": sum(row[0] for row in per_name.values()),
        "kernel_total_us": _us(grand),
        "by_class": {cls: _us(ns) for cls, ns in sorted(by_class.items(), key=lambda kv: -kv[1])},
        "gpu_time": gpu_time,
    }


def cpu_table(cpu: list[tuple[int, int, int, str, bool]], top: int = TOP_ROWS) -> dict[str, Any]:
    """Top CPU ops by self time (own duration minus direct children's), with
    inclusive totals.  Annotation ranges take part in the nesting but are not rows."""
    by_thread: dict[int, list[tuple[int, int, str, bool]]] = {}
    for tid, start, end, name, is_op in cpu:
        by_thread.setdefault(tid, []).append((start, end, name, is_op))
    per_name: dict[str, list[int]] = {}  # name -> [calls, self, total]
    for items in by_thread.values():
        items.sort(key=lambda it: (it[0], -it[1]))
        child = [0] * len(items)
        stack: list[int] = []
        for idx, (start, end, _name, _op) in enumerate(items):
            while stack and items[stack[-1]][1] <= start:
                stack.pop()
            if stack:
                child[stack[-1]] += end - start
            stack.append(idx)
        for idx, (start, end, name, is_op) in enumerate(items):
            if not is_op:
                continue
            dur = end - start
            row = per_name.get(name)
            if row is None:
                row = per_name[name] = [0, 0, 0]
            row[0] += 1
            row[1] += max(0, dur - child[idx])
            row[2] += dur
    grand_self = sum(row[1] for row in per_name.values())
    rows = sorted(per_name.items(), key=lambda item: item[1][1], reverse=True)
    return {
        "cpu_ops": tuple(
            CpuOpRow(
                name=name[:MAX_NAME],
                calls=row[0],
                self_us=_us(row[1]),
                total_us=_us(row[2]),
                mean_self_us=_us(row[1] / row[0]),
                share=round(row[1] / grand_self, 6) if grand_self else 0.0,
            )
            for name, row in rows[:top]
        ),
        "cpu_op_names": len(per_name),
        "cpu_self_total_us": _us(grand_self),
    }


def reduce_events(events: Iterable[Any], top: int = TOP_ROWS) -> dict[str, Any]:
    """Kernel table, CPU op table and GPU time split for one capture: the
    :class:`~gputui.protocol.capture.CaptureResult` fields they fill, by name."""
    cpu, gpu, total = extract(events)
    out: dict[str, Any] = {"events": total}
    out.update(kernel_table(gpu, top))
    out.update(cpu_table(cpu, top))
    return out
