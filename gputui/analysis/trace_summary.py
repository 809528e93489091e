"""What one rank's trace says, as values: the input of the trace rules and of
``gputui analyze`` (pure).

:func:`summarize` turns a :class:`~gputui.trace.timeline.Timeline` into a
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
from gputui.protocol.capture import CpuOpRow, KernelRow
from gputui.protocol.op_rows import FlopTotals, OpRow
from gputui.protocol.trace_metrics import TraceMetrics
from gputui.trace import tables
from gputui.trace.kernels import short_kernel_name
from gputui.trace.tables import TOP_ROWS
from gputui.trace.timeline import (
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
from gputui.trace.trace_metrics import compute

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
      memset; ``kernel_class`` from :mod:`gputui.trace.kernels`), over the
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
    #: from the first GPU activity's start to the last one's end, over the
    #: whole trace (what ``kernels`` and ``kernel_us_by_class`` cover)
    gpu_span_us: float | None = None
    cpu_ops: tuple[CpuOpRow, ...] = ()
    cpu_op_names: int = 0
    cpu_self_total_us: float = 0.0
    #: per op and input signature, most GPU time first (traces with shapes)
    op_rows: tuple[OpRow, ...] = ()
    #: the FLOPs of the ops inside the host steps and how many steps (traces
    #: with shapes; None otherwise)
    step_flops: tuple[FlopTotals, int] | None = None

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


def kernel_rows(
    timeline: Timeline, top: int = TOP_ROWS
) -> tuple[tuple[KernelRow, ...], int, float, dict[str, float]]:
    """Top GPU activities by total time, the number of names, the total (µs),
    and the total per kernel class (µs, biggest first)."""
    table = tables.kernel_table(
        tables.tally((a.name, a.dur_ns) for a in timeline.gpu if a.kind in _TABLE_KINDS), top
    )
    return table.rows, table.names, table.total_us, table.by_class_us


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
    # name -> [calls, self, total] (µs)
    table = tables.cpu_op_table(self_times(by_thread), top, per_us=1.0)
    return table.rows, table.names, table.self_total_us


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
    step_flops: tuple[FlopTotals, int] | None = None,
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
        gpu_span_us=(
            max(a.end_us for a in timeline.gpu) - min(a.start_us for a in timeline.gpu)
            if timeline.gpu
            else None
        ),
        cpu_ops=ops,
        cpu_op_names=op_names,
        cpu_self_total_us=self_total,
        op_rows=tuple(op_rows),
        step_flops=step_flops,
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
