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

import gputui.trace.timeline as tl
from gputui.protocol.capture import MAX_CAST_PARENTS, GpuTime
from gputui.trace import tables
from gputui.trace.kernels import COMMUNICATION, COMPUTE, MEMCPY, MEMSET, coarse_of
from gputui.trace.scan import CAST_OP, Scan
from gputui.trace.step_breakdown import COLLECTIVE_OPS
from gputui.trace.tables import TOP_ROWS, us
from gputui.trace.trace_metrics import compute as compute_trace_metrics

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


#: raw-event activity types of host-side launch/runtime calls, GPU activity and
#: host ranges, as timeline kinds
_RUNTIME_KINDS = {"cuda_runtime": tl.RUNTIME, "cuda_driver": tl.DRIVER}
_GPU_KINDS = {
    "kernel": tl.KERNEL,
    "concurrent_kernel": tl.KERNEL,
    "gpu_memcpy": tl.MEMCPY,
    "gpu_memset": tl.MEMSET,
    "cuda_sync": tl.SYNC,
}
_HOST_KINDS = {"cpu_op": tl.OP, "user_annotation": tl.ANNOTATION, "python_function": tl.PYTHON}


def _int_call(ev: Any, name: str, default: int = -1) -> int:
    return tl.as_int(_call(ev, name), default)


def _fields(ev: Any, kinds: dict[Any, str]) -> tuple[str, int, int, str, bool, str]:
    """``(name, start_ns, duration_ns, activity type, is user annotation, device
    kind)`` of one raw event.  Direct calls first (a profile has 50-70k events
    and each guarded call costs more than the call itself); any problem, and the
    guarded reads take over."""
    try:
        dt = ev.device_type()
        kind = kinds.get(dt)
        if kind is None:
            kind = kinds[dt] = _device_kind(ev)
        name = ev.name()
        start = ev.start_ns()
        dur = ev.duration_ns()
        typed = getattr(ev, "activity_type", None)
        activity = typed() if typed is not None else tl.infer_activity(name, kind != "CPU")
        try:
            user_ann = ev.is_user_annotation()
        except AttributeError:  # torch 2.4: the record scope tells
            user_ann = tl.is_user_annotation(ev)
        if (
            type(name) is str
            and type(start) is int
            and type(dur) is int
            and type(activity) is str
            and type(user_ann) is bool
        ):
            return name, start, dur, activity, user_ann, kind
    except Exception:
        pass
    name = str(_call(ev, "name", "") or "")
    kind = _device_kind(ev)
    activity = _call(ev, "activity_type")
    return (
        name,
        int(_call(ev, "start_ns", 0) or 0),
        int(_call(ev, "duration_ns", 0) or 0),
        str(activity) if activity else tl.infer_activity(name, kind != "CPU"),
        tl.is_user_annotation(ev),
        kind,
    )


def extract(
    events: Iterable[Any],
) -> tuple[
    list[tuple[int, int, int, str, bool]], list[tuple[int, int, int, str]], int, tl.Timeline
]:
    """Split raw events into CPU records ``(thread, start_ns, end_ns, name, is_op)``
    and GPU activity records ``(device, start_ns, end_ns, name)``; also the total
    number of events seen, and the same events as a timeline for the trace
    metrics.  Correlation ids and streams are read only where they are used
    (launch calls and GPU activity), to keep this pass cheap."""
    cpu: list[tuple[int, int, int, str, bool]] = []
    gpu_raw: list[tuple[int, int, int, str, str, bool, int, int, int]] = []
    timeline = tl.Timeline()
    runtime_calls = timeline.runtime
    ranges = timeline.ranges
    annotation_names: set[str] = set()
    kinds: dict[Any, str] = {}
    total = 0
    for ev in events:
        total += 1
        name, start, dur, activity, user_ann, kind = _fields(ev, kinds)
        if kind == "CPU":
            if user_ann or activity == "user_annotation":
                annotation_names.add(name)
            is_op = not user_ann and activity not in _CPU_SKIP
            try:
                if is_op and ev.is_python_function():
                    is_op = False
                tid = ev.start_thread_id()
                if type(tid) is not int:
                    tid = int(tid or 0)
            except Exception:
                if is_op and _call(ev, "is_python_function", False):
                    is_op = False
                tid = int(_call(ev, "start_thread_id", 0) or 0)
            cpu.append((tid, start, start + dur, name, is_op))
            # HTA's rounding (timeline.round_ns), inline: this loop is hot
            start_us = -(-start // 1000)
            end_us = (start + dur) // 1000
            if end_us < start_us:
                end_us = start_us
            runtime_kind = _RUNTIME_KINDS.get(activity)
            if runtime_kind is not None:
                corr = _int_call(ev, "correlation_id")
                runtime_calls.append(
                    tl.RuntimeCall(start_us, end_us, name, tid, corr, -1, runtime_kind)
                )
            else:
                host_kind = tl.ANNOTATION if user_ann else _HOST_KINDS.get(activity, tl.HOST_OTHER)
                # a collective's id joins it to its kernels (step breakdown)
                ext = _int_call(ev, "correlation_id") if name in COLLECTIVE_OPS else -1
                ranges.append(tl.HostRange(start_us, end_us, name, tid, host_kind, ext))
        else:
            gpu_raw.append(
                (
                    int(_call(ev, "device_index", 0) or 0),
                    start,
                    start + dur,
                    name,
                    activity,
                    user_ann,
                    # for GPU activity the resource is the stream
                    _int_call(ev, "device_resource_id", 0),
                    _int_call(ev, "correlation_id"),
                    _int_call(ev, "linked_correlation_id"),
                )
            )
    timeline.events = total
    gpu: list[tuple[int, int, int, str]] = []
    for device, start, end, name, activity, user_ann, stream, corr, ext in gpu_raw:
        start_us, end_us = tl.round_ns(start, end - start)
        if activity:
            if activity == "gpu_user_annotation":
                ranges.append(tl.HostRange(start_us, end_us, name, device, tl.GPU_ANNOTATION, -1))
            elif activity in _GPU_KINDS or name in tl.SYNC_NAMES:
                gpu_kind = _GPU_KINDS.get(activity, tl.SYNC)
                timeline.gpu.append(
                    tl.GpuActivity(
                        start_us, end_us, end - start, gpu_kind, name, stream, device, corr, ext
                    )
                )
            if activity not in _GPU_KEEP:
                continue
        elif user_ann or name in annotation_names or _ANNOTATION_NAME.match(name):
            ranges.append(tl.HostRange(start_us, end_us, name, device, tl.GPU_ANNOTATION, -1))
            continue
        else:  # an older torch without activity types: a kernel
            timeline.gpu.append(
                tl.GpuActivity(
                    start_us, end_us, end - start, tl.KERNEL, name, stream, device, corr, ext
                )
            )
        gpu.append((device, start, end, name))
    return cpu, gpu, total, timeline


def kernel_table(gpu: list[tuple[int, int, int, str]], top: int = TOP_ROWS) -> dict[str, Any]:
    """Top GPU activities by total time, totals per class, and union-based GPU time
    split (HTA definitions: idle = span - union of all activity)."""
    device_time: dict[int, int] = {}
    for device, start, end, _name in gpu:
        device_time[device] = device_time.get(device, 0) + end - start
    table = tables.kernel_table(
        tables.tally((name, end - start) for _d, start, end, name in gpu), top, MAX_NAME
    )
    classes = table.classes
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
        merged = tl.merge(every)
        span = merged[-1][1] - merged[0][0] if merged else 0
        busy = tl.length(merged)
        unions = {cls: tl.merge(iv) for cls, iv in spans.items()}
        comm = tl.length(unions[COMMUNICATION])
        gpu_time = GpuTime(
            device=device,
            span_us=us(span),
            busy_us=us(busy),
            idle_us=us(span - busy),
            compute_us=us(tl.length(unions[COMPUTE])),
            communication_us=us(comm),
            memcpy_us=us(tl.length(unions[MEMCPY])),
            memset_us=us(tl.length(unions[MEMSET])),
            comm_compute_overlap=(
                round(tl.length(tl.intersect(unions[COMMUNICATION], unions[COMPUTE])) / comm, 6)
                if comm
                else None
            ),
        )
    return {
        "kernels": table.rows,
        "kernel_names": table.names,
        "kernel_calls": table.calls,
        "kernel_total_us": table.total_us,
        "by_class": table.by_class_us,
        "gpu_time": gpu_time,
    }


def cpu_table(cpu: list[tuple[int, int, int, str, bool]], top: int = TOP_ROWS) -> dict[str, Any]:
    """Top CPU ops by self time (own duration minus direct children's), with
    inclusive totals.  Annotation ranges take part in the nesting but are not rows."""
    by_thread: dict[int, list[tuple[int, int, str, bool]]] = {}
    for tid, start, end, name, is_op in cpu:
        by_thread.setdefault(tid, []).append((start, end, name, is_op))
    # name -> [calls, self, total] (ns)
    table = tables.cpu_op_table(tl.self_times(by_thread), top, max_name=MAX_NAME)
    return {
        "cpu_ops": table.rows,
        "cpu_op_names": table.names,
        "cpu_self_total_us": table.self_total_us,
    }


def reduce_events(events: Iterable[Any], top: int = TOP_ROWS) -> dict[str, Any]:
    """Kernel table, CPU op table and GPU time split for one capture: the
    :class:`~gputui.protocol.capture.CaptureResult` fields they fill, by name."""
    cpu, gpu, total, timeline = extract(events)
    out: dict[str, Any] = {"events": total}
    out.update(kernel_table(gpu, top))
    out.update(cpu_table(cpu, top))
    try:
        scan = Scan(timeline)
        out["trace_metrics"] = compute_trace_metrics(timeline, scan=scan)
        if any(row.name == CAST_OP for row in out["cpu_ops"]):
            out["cast_parents"] = scan.cast_parents()[:MAX_CAST_PARENTS]
    except Exception:  # the tables above are worth sending without the metrics
        out["trace_metrics"] = None
    return out
