"""Timeline metrics with the definitions of Holistic Trace Analysis 0.5.0 (pure,
standard library only: the hook computes them inside the job).

Each function reads a :class:`~gputui.trace.timeline.Timeline` (or its
parts) and returns a value of :mod:`gputui.protocol.trace_metrics`.  The
definitions follow HTA's source (``hta/analyzers/breakdown_analysis.py``,
``communication_analysis.py``, ``cuda_kernel_analysis.py``, and its trace
parser), so the numbers agree with what HTA prints for the same trace; the
tests compare both on real H100 traces.  The TensorBoard plugin's step
breakdown is in :mod:`gputui.trace.step_breakdown`.

:func:`compute` reads one :class:`~gputui.trace.scan.Scan` of the timeline for
every metric; the functions below it are the general definitions, used where
two runtime calls share a correlation id (the scan's joins assume they do not)
and by the tests as the reference.
"""

from __future__ import annotations

from collections.abc import Sequence

from gputui.protocol.trace_metrics import (
    IdleBreakdown,
    LaunchStats,
    StreamIdle,
    TemporalBreakdown,
    TraceMetrics,
)
from gputui.trace.account import step_account
from gputui.trace.markers import compiled_launch_share, compiled_names, markers_of
from gputui.trace.scan import (
    HTA_LAUNCH_CALLS,
    KERNEL_WAIT_US,
    LAUNCH_DELAY_CUTOFF_US,
    RUNTIME_CUTOFF_US,
    Scan,
    merge_sorted,
)
from gputui.trace.step_breakdown import step_breakdown
from gputui.trace.timeline import (
    HTA_COMMUNICATION,
    HTA_COMPUTATION,
    KERNEL,
    MEMCPY,
    MEMSET,
    GpuActivity,
    KernelTypes,
    RuntimeCall,
    Timeline,
    by_stream,
    hta_window,
    intersect,
    length,
    merge,
)

__all__ = [
    "KERNEL_WAIT_US",
    "LAUNCH_CALLS",
    "LAUNCH_DELAY_CUTOFF_US",
    "RUNTIME_CUTOFF_US",
    "compute",
    "hta_metrics",
]

#: the calls HTA's launch statistics join to GPU work
LAUNCH_CALLS = HTA_LAUNCH_CALLS
#: the activity kinds HTA's idle breakdown looks at (its kernel, memcpy and
#: memset categories; not synchronisations)
_IDLE_KINDS = frozenset({KERNEL, MEMCPY, MEMSET})


def compute(
    timeline: Timeline, include_last_step: bool = False, scan: Scan | None = None
) -> TraceMetrics:
    """Every metric of one rank's timeline.  The HTA parts read HTA's window
    (the last ProfilerStep left out unless ``include_last_step``); the step
    breakdown and the account read the steps, as the TensorBoard plugin does.
    ``scan``: the timeline's scan (made with the same ``include_last_step``),
    where one is made already."""
    scan = Scan(timeline, include_last_step) if scan is None else scan
    temporal, idle, overlap, launch = hta_metrics(scan)
    steps_total, dropped = scan.hta_steps
    return TraceMetrics(
        steps_total=steps_total,
        last_step_dropped=dropped,
        temporal=temporal,
        idle_breakdown=idle,
        comm_compute_overlap_pct=overlap,
        launch=launch,
        step_breakdown=step_breakdown(timeline, scan),
        account=step_account(timeline, scan),
        markers=markers_of(
            scan.range_names,
            scan.runtime_names,
            scan.gpu.kernel_names,
            timeline.ranges,
            compiled_share=_compiled_share(scan),
        ),
    )


def _compiled_share(scan: Scan) -> float | None:
    """The share of the window's kernel launches made inside torch.compile's
    ranges (None where none ran)."""
    names = compiled_names(scan.range_names)
    if not names:
        return None
    return compiled_launch_share(scan.timeline.ranges, scan.window_kernel_launches(), names)


def hta_metrics(
    scan: Scan,
) -> tuple[TemporalBreakdown | None, IdleBreakdown | None, float | None, LaunchStats | None]:
    """HTA's temporal breakdown, idle breakdown, communication overlap and
    launch statistics over HTA's window: from the scan's GPU pass, or, where
    two runtime calls share a correlation id, by the general definitions."""
    if not scan.unique_calls:
        part = hta_window(scan.timeline, scan.include_last_step).timeline
        types = KernelTypes()
        return (
            temporal_breakdown(part.gpu, types),
            idle_breakdown(part.gpu, part.runtime),
            comm_compute_overlap_pct(part.gpu, types),
            launch_stats(part.gpu, part.runtime),
        )
    g = scan.gpu
    temporal: TemporalBreakdown | None = None
    overlap: float | None = None
    if g.hta_all:
        every = merge_sorted(g.hta_all)
        span = every[-1][1] - every[0][0]
        idle_us = span - length(every)
        comp = merge_sorted(g.hta_comp)
        compute_us = length(comp)
        temporal = TemporalBreakdown(
            span_us=float(span),
            idle_us=float(idle_us),
            compute_us=float(compute_us),
            non_compute_us=float(span - compute_us - idle_us),
        )
        comm = merge_sorted(g.hta_comm)
        comm_us = length(comm)
        if comm_us > 0:
            overlap = round(100.0 * length(intersect(comp, comm)) / comm_us, 2)
    idle: IdleBreakdown | None = None
    if g.idle:
        rows = [
            StreamIdle(stream, float(r[1]), float(r[2]), float(r[3]))
            for stream, r in sorted(g.idle.items())
        ]
        idle = IdleBreakdown(
            host_wait_us=float(sum(r.host_wait_us for r in rows)),
            kernel_wait_us=float(sum(r.kernel_wait_us for r in rows)),
            other_us=float(sum(r.other_us for r in rows)),
            streams=tuple(rows),
        )
    cpu, work, delays = g.launch_us
    launch = _launch_stats(sorted(cpu), sorted(work), sorted(delays), g.short)
    return temporal, idle, overlap, launch


def _on_streams(gpu: Sequence[GpuActivity]) -> list[GpuActivity]:
    # HTA's breakdowns take every GPU event with a stream (``stream != -1``)
    return [a for a in gpu if a.stream != -1]


def temporal_breakdown(
    gpu: Sequence[GpuActivity], types: KernelTypes | None = None
) -> TemporalBreakdown | None:
    """Span = last end - first start of the activities on streams; idle = span -
    their union; compute = the union of computation kernels; non-compute = the
    rest.  None without GPU activity."""
    acts = _on_streams(gpu)
    if not acts:
        return None
    types = types or KernelTypes()
    every = merge((a.start_us, a.end_us) for a in acts)
    span = every[-1][1] - every[0][0]
    idle = span - length(every)
    compute = length(
        merge((a.start_us, a.end_us) for a in acts if types(a.name) == HTA_COMPUTATION)
    )
    return TemporalBreakdown(
        span_us=float(span),
        idle_us=float(idle),
        compute_us=float(compute),
        non_compute_us=float(span - compute - idle),
    )


def launch_starts(runtime: Sequence[RuntimeCall]) -> dict[int, int]:
    """Correlation id -> start of the host call that launched it."""
    return {r.correlation: r.start_us for r in runtime if r.correlation >= 0}


def idle_breakdown(
    gpu: Sequence[GpuActivity], runtime: Sequence[RuntimeCall]
) -> IdleBreakdown | None:
    """Per stream, in start order, the gap before each kernel, memcpy or memset
    (from the previous one's end) is host wait if its launch call started after
    that end, else kernel wait if shorter than :data:`KERNEL_WAIT_US`, else
    other.  None without such activity."""
    acts = [a for a in gpu if a.stream != -1 and a.kind in _IDLE_KINDS]
    if not acts:
        return None
    launched = launch_starts(runtime)
    rows: list[StreamIdle] = []
    for stream, items in by_stream(acts):
        host = kernel = other = 0
        prev_end: int | None = None
        for a in items:
            if prev_end is not None:
                gap = a.start_us - prev_end
                launch = launched.get(a.correlation)
                if launch is not None and launch > prev_end:
                    host += gap
                elif gap < KERNEL_WAIT_US:
                    kernel += gap
                else:
                    other += gap
            prev_end = a.end_us
        rows.append(StreamIdle(stream, float(host), float(kernel), float(other)))
    return IdleBreakdown(
        host_wait_us=float(sum(r.host_wait_us for r in rows)),
        kernel_wait_us=float(sum(r.kernel_wait_us for r in rows)),
        other_us=float(sum(r.other_us for r in rows)),
        streams=tuple(rows),
    )


def comm_compute_overlap_pct(
    gpu: Sequence[GpuActivity], types: KernelTypes | None = None
) -> float | None:
    """|union of computation ∩ union of communication| / |union of
    communication|, in percent; None without communication kernels."""
    types = types or KernelTypes()
    acts = _on_streams(gpu)
    comm = merge((a.start_us, a.end_us) for a in acts if types(a.name) == HTA_COMMUNICATION)
    comm_us = length(comm)
    if comm_us <= 0:
        return None
    comp = merge((a.start_us, a.end_us) for a in acts if types(a.name) == HTA_COMPUTATION)
    return round(100.0 * length(intersect(comp, comm)) / comm_us, 2)


def quantile(sorted_values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between the closest ranks (numpy's default)."""
    if not sorted_values:
        return None
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def launch_stats(gpu: Sequence[GpuActivity], runtime: Sequence[RuntimeCall]) -> LaunchStats | None:
    """Launch calls joined to their GPU work; None when no pair is found (a
    CPU-only trace, or one without correlation ids)."""
    calls: dict[int, list[RuntimeCall]] = {}
    for r in runtime:
        if r.name in LAUNCH_CALLS and r.correlation >= 0:
            calls.setdefault(r.correlation, []).append(r)
    pairs: list[tuple[int, int, int]] = []  # (call µs, GPU µs, launch delay µs)
    for a in gpu:
        if a.stream == -1:
            continue
        for r in calls.get(a.correlation, ()):
            call_us = r.end_us - r.start_us
            delay = max(0, a.start_us - r.start_us - call_us)
            pairs.append((call_us, a.end_us - a.start_us, delay))
    cpu = sorted(p[0] for p in pairs)
    work = sorted(p[1] for p in pairs)
    delays = sorted(p[2] for p in pairs)
    short = sum(1 for c, g, _ in pairs if c <= RUNTIME_CUTOFF_US and g < c)
    return _launch_stats(cpu, work, delays, short)


def _launch_stats(
    cpu: list[int], work: list[int], delays: list[int], short: int
) -> LaunchStats | None:
    """The statistics of launch pairs from their sorted call durations, GPU
    durations and launch delays, and the GPU work shorter than its call."""
    if not cpu:
        return None
    return LaunchStats(
        launches=len(cpu),
        short_kernels=short,
        runtime_outliers=sum(1 for c in cpu if c > RUNTIME_CUTOFF_US),
        launch_delay_outliers=sum(1 for d in delays if d > LAUNCH_DELAY_CUTOFF_US),
        runtime_us_mean=round(sum(cpu) / len(cpu), 3),
        runtime_us_p95=_round(quantile(cpu, 0.95)),
        gpu_us_median=_round(quantile(work, 0.5)),
        launch_delay_us_mean=round(sum(delays) / len(delays), 3),
        launch_delay_us_median=_round(quantile(delays, 0.5)),
        launch_delay_us_p95=_round(quantile(delays, 0.95)),
        launch_delay_us_max=float(delays[-1]),
    )


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
