"""What one rank's trace says, as values: the input of the trace rules and of
``gputui analyze`` (pure).

:func:`summarize` turns a :class:`~gputui.analysis.timeline.Timeline` into a
:class:`TraceSummary`: the trace metrics (HTA breakdowns, launch statistics,
the TensorBoard plugin's step breakdown), the top kernels and CPU ops in the
same row types a capture result carries (so a rule reads a trace file and a
live capture alike), and what the trace says about its GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gputui.analysis.finding import Finding, ranked
from gputui.analysis.kernels import kernel_class, short_kernel_name
from gputui.analysis.timeline import (
    DRIVER,
    GPU_ANNOTATION,
    KERNEL,
    MEMCPY,
    MEMSET,
    OP,
    RUNTIME,
    Timeline,
    self_times,
    step_id,
)
from gputui.analysis.trace_metrics import compute
from gputui.protocol.capture import CpuOpRow, KernelRow
from gputui.protocol.op_rows import OpRow
from gputui.protocol.trace_metrics import TraceMetrics

TOP_ROWS = 30
_TABLE_KINDS = frozenset({KERNEL, MEMCPY, MEMSET})


@dataclass(frozen=True)
class TraceSummary:
    """One rank's trace, summarized.  Every time is in microseconds of the
    trace; None where the trace cannot say.

    - ``rank``: from the trace's ``distributedInfo``, else the file's position
      among those given (``rank_from`` says which: "distributedInfo", "order").
    - ``steps``: the N of every host-side ``ProfilerStep#N``, in time order.
    - ``metrics``: :class:`~gputui.protocol.trace_metrics.TraceMetrics` -- the
      same value a capture result carries (``temporal``, ``idle_breakdown``,
      ``comm_compute_overlap_pct``, ``launch``, ``step_breakdown``).
    - ``kernels``: the top GPU activities by total time (kernels, memcpy,
      memset; ``kernel_class`` from :mod:`gputui.analysis.kernels`), over the
      whole trace; ``kernel_us_by_class`` totals every activity per class.
    - ``cpu_ops``: the top host ops and runtime calls by self time (a
      ``cudaStreamSynchronize`` row is a host sync), over the whole trace.
    """

    rank: int
    rank_from: str
    path: str
    world_size: int | None = None
    device_name: str | None = None
    device_memory_bytes: int | None = None
    compute_capability: str | None = None
    events: int = 0
    gpu_activities: int = 0
    steps: tuple[int, ...] = ()
    metrics: TraceMetrics = field(default_factory=TraceMetrics)
    kernels: tuple[KernelRow, ...] = ()
    kernel_names: int = 0
    kernel_total_us: float = 0.0
    kernel_us_by_class: Mapping[str, float] = field(default_factory=dict)
    cpu_ops: tuple[CpuOpRow, ...] = ()
    cpu_op_names: int = 0
    cpu_self_total_us: float = 0.0
    #: per op and input signature, most GPU time first (traces with shapes)
    op_rows: tuple[OpRow, ...] = ()

    @property
    def step_us_mean(self) -> float | None:
        sb = self.metrics.step_breakdown
        return None if sb is None else sb.step_us_mean


#: The trace rules: each reads a summary and returns findings.  The rule engine
#: registers its trace rules here; ``gputui analyze`` shows what they return.
TraceRule = Callable[[TraceSummary], Iterable[Finding]]
TRACE_RULES: list[TraceRule] = []


def trace_findings(
    summary: TraceSummary, rules: Sequence[TraceRule] | None = None
) -> list[Finding]:
    """Every registered trace rule's findings for one rank, ranked."""
    found: list[Finding] = []
    for rule in TRACE_RULES if rules is None else rules:
        found.extend(rule(summary))
    return ranked(found)


def _us(ns: float) -> float:
    return round(ns / 1000.0, 3)


def kernel_rows(
    timeline: Timeline, top: int = TOP_ROWS
) -> tuple[tuple[KernelRow, ...], int, float, dict[str, float]]:
    """Top GPU activities by total time, the number of names, the total (µs),
    and the total per kernel class (µs, biggest first)."""
    per_name: dict[str, list[int]] = {}  # name -> [calls, total, min, max] (ns)
    for a in timeline.gpu:
        if a.kind not in _TABLE_KINDS:
            continue
        row = per_name.get(a.name)
        dur = a.dur_ns
        if row is None:
            per_name[a.name] = [1, dur, dur, dur]
        else:
            row[0] += 1
            row[1] += dur
            if dur < row[2]:
                row[2] = dur
            if dur > row[3]:
                row[3] = dur
    grand = sum(row[1] for row in per_name.values())
    by_class: dict[str, float] = {}
    classes = {name: kernel_class(name) for name in per_name}
    for name, row in per_name.items():
        by_class[classes[name]] = by_class.get(classes[name], 0) + row[1]
    rows = sorted(per_name.items(), key=lambda item: item[1][1], reverse=True)[:top]
    table = tuple(
        KernelRow(
            name=name,
            kernel_class=classes[name],
            calls=row[0],
            total_us=_us(row[1]),
            mean_us=_us(row[1] / row[0]),
            min_us=_us(row[2]),
            max_us=_us(row[3]),
            share=round(row[1] / grand, 6) if grand else 0.0,
        )
        for name, row in rows
    )
    ordered = dict(sorted(((c, _us(ns)) for c, ns in by_class.items()), key=lambda kv: -kv[1]))
    return table, len(per_name), _us(grand), ordered


def cpu_op_rows(timeline: Timeline, top: int = TOP_ROWS) -> tuple[tuple[CpuOpRow, ...], int, float]:
    """Top host ops and runtime calls by self time (own time minus direct
    children's, per thread); annotations and Python functions take part in the
    nesting but are not rows.  Also the number of names and the total self time."""
    by_thread: dict[int, list[tuple[int, int, str, bool]]] = {}
    for r in timeline.ranges:
        if r.kind != GPU_ANNOTATION:
            by_thread.setdefault(r.thread, []).append((r.start_us, r.end_us, r.name, r.kind == OP))
    for c in timeline.runtime:
        if c.kind in (RUNTIME, DRIVER):
            by_thread.setdefault(c.thread, []).append((c.start_us, c.end_us, c.name, True))
    per_name = self_times(by_thread)  # name -> [calls, self, total] (µs)
    grand = sum(row[1] for row in per_name.values())
    rows = sorted(per_name.items(), key=lambda item: item[1][1], reverse=True)[:top]
    table = tuple(
        CpuOpRow(
            name=name,
            calls=row[0],
            self_us=float(row[1]),
            total_us=float(row[2]),
            mean_self_us=round(row[1] / row[0], 3),
            share=round(row[1] / grand, 6) if grand else 0.0,
        )
        for name, row in rows
    )
    return table, len(per_name), float(grand)


def summarize(
    timeline: Timeline,
    rank: int,
    rank_from: str,
    path: str,
    *,
    world_size: int | None = None,
    device_name: str | None = None,
    device_memory_bytes: int | None = None,
    compute_capability: str | None = None,
    include_last_step: bool = False,
    top: int = TOP_ROWS,
    op_rows: Sequence[OpRow] = (),
) -> TraceSummary:
    """The summary of one rank (the device fields: what the trace says of its GPU)."""
    kernels, names, total, by_class = kernel_rows(timeline, top)
    ops, op_names, self_total = cpu_op_rows(timeline, top)
    steps = tuple(s for s in (step_id(r.name) for r in timeline.step_ranges()) if s is not None)
    return TraceSummary(
        rank=rank,
        rank_from=rank_from,
        path=path,
        world_size=world_size,
        device_name=device_name,
        device_memory_bytes=device_memory_bytes,
        compute_capability=compute_capability,
        events=timeline.events,
        gpu_activities=len(timeline.gpu),
        steps=steps,
        metrics=compute(timeline, include_last_step),
        kernels=kernels,
        kernel_names=names,
        kernel_total_us=total,
        kernel_us_by_class=by_class,
        cpu_ops=ops,
        cpu_op_names=op_names,
        cpu_self_total_us=self_total,
        op_rows=tuple(op_rows),
    )


def summary_json(summary: TraceSummary, findings: Sequence[Finding] = ()) -> dict[str, Any]:
    """One rank of ``gputui analyze --json`` (docs/json.md)."""
    m = summary.metrics
    out: dict[str, Any] = {
        "rank": summary.rank,
        "rank_from": summary.rank_from,
        "path": summary.path,
        "world_size": summary.world_size,
        "device": {
            "name": summary.device_name,
            "total_memory_bytes": summary.device_memory_bytes,
            "compute_capability": summary.compute_capability,
        },
        "events": summary.events,
        "gpu_activities": summary.gpu_activities,
        "steps": list(summary.steps),
    }
    out.update(m.to_wire())
    out["kernels"] = [
        {**k.to_wire(), "short_name": short_kernel_name(k.name)} for k in summary.kernels
    ]
    out["kernel_names"] = summary.kernel_names
    out["kernel_total_us"] = summary.kernel_total_us
    out["kernel_us_by_class"] = dict(summary.kernel_us_by_class)
    out["cpu_ops"] = [o.to_wire() for o in summary.cpu_ops]
    out["cpu_op_names"] = summary.cpu_op_names
    out["cpu_self_total_us"] = summary.cpu_self_total_us
    out["findings"] = [f.to_json() for f in findings]
    return out
