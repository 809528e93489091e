"""Timeline metrics with the definitions of Holistic Trace Analysis 0.5.0 (pure,
standard library only: the hook computes them inside the job).

Each function reads a :class:`~gputui.trace.timeline.Timeline` (or its
parts) and returns a value of :mod:`gputui.protocol.trace_metrics`.  The
definitions follow HTA's source (``hta/analyzers/breakdown_analysis.py``,
``communication_analysis.py``, ``cuda_kernel_analysis.py``, and its trace
parser), so the numbers agree with what HTA prints for the same trace; the
tests compare both on real H100 traces.  The TensorBoard plugin's step
breakdown is in :mod:`gputui.trace.step_breakdown`.
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
from gputui.trace.markers import job_markers
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

#: HTA's ``consecutive_kernel_delay``: documented as 30 ns, compared with its
#: microsecond timestamps, so a gap shorter than 30 µs is "kernel wait"
KERNEL_WAIT_US = 30
#: HTA's ``runtime_cutoff`` and ``launch_delay_cutoff`` (µs)
RUNTIME_CUTOFF_US = 50
LAUNCH_DELAY_CUTOFF_US = 100
#: the calls HTA's launch statistics join to GPU work
LAUNCH_CALLS = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "runFunction - job_prep_and_submit_for_execution",
        "cudaMemcpyAsync",
        "cudaMemsetAsync",
    }
)
#: the activity kinds HTA's idle breakdown looks at (its kernel, memcpy and
#: memset categories; not synchronisations)
_IDLE_KINDS = frozenset({KERNEL, MEMCPY, MEMSET})


def compute(timeline: Timeline, include_last_step: bool = False) -> TraceMetrics:
    """Every metric of one rank's timeline.  The HTA parts read HTA's window
    (the last ProfilerStep left out unless ``include_last_step``); the step
    breakdown reads the whole timeline, as the TensorBoard plugin does."""
    window = hta_window(timeline, include_last_step)
    part = window.timeline
    types = KernelTypes()
    return TraceMetrics(
        steps_total=window.steps_total,
        last_step_dropped=window.last_step_dropped,
        temporal=temporal_breakdown(part.gpu, types),
        idle_breakdown=idle_breakdown(part.gpu, part.runtime),
        comm_compute_overlap_pct=comm_compute_overlap_pct(part.gpu, types),
        launch=launch_stats(part.gpu, part.runtime),
        step_breakdown=step_breakdown(timeline),
        account=step_account(timeline),
        markers=job_markers(timeline),
    )


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
    if not pairs:
        return None
    cpu = sorted(p[0] for p in pairs)
    work = sorted(p[1] for p in pairs)
    delays = sorted(p[2] for p in pairs)
    return LaunchStats(
        launches=len(pairs),
        short_kernels=sum(1 for c, g, _ in pairs if c <= RUNTIME_CUTOFF_US and g < c),
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
