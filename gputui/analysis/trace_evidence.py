"""A trace file as the analyzer's evidence: ``gputui analyze`` runs the same
rules as the attach screen.

A torch.profiler trace is one profiled window: its kernel table, CPU ops and
runtime calls are a capture's (so the capture rules read it as they read a live
capture), and its ``ProfilerStep#N`` ranges are the steps.  The trace has no
forward/backward marks, so its steps carry one phase the rules know, ``data``
(the TensorBoard plugin's DataLoader time, spread over the steps in proportion
to their length), and the rest of each step under ``traced``.  The few steps of
a trace count as enough: they are all the evidence there will be.  A trace has
no NVML samples and no memory counters, so the GPU and memory rules stay quiet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gputui.analysis import engine
from gputui.analysis.evidence import (
    TINY_KERNEL_US,
    CaptureView,
    JobEvidence,
    RankEvidence,
    RanksEvidence,
    roofline_of,
)
from gputui.analysis.finding import Finding
from gputui.analysis.roofline import Roof
from gputui.analysis.steps import step_stats
from gputui.analysis.trace_summary import WINDOW_STEPS, TraceSummary
from gputui.protocol.messages import DATA
from gputui.protocol.steps import StepRecord
from gputui.protocol.trace_metrics import ACCOUNT_BUCKETS
from gputui.trace.scan import TINY_KERNEL_NS

#: the name of a traced step's time outside data loading (no rule reads it)
TRACED = "traced"


def _steps(summary: TraceSummary, shares: Mapping[str, float]) -> tuple[StepRecord, ...]:
    """The trace's profiler steps, each phase ``shares`` of its wall time and the
    rest :data:`TRACED`."""
    sb = summary.metrics.step_breakdown
    if sb is None or not sb.step_us:
        return ()
    first = sb.first_step or 0
    out = []
    t = 0.0
    for i, us in enumerate(sb.step_us):
        wall = us / 1e6
        t += wall
        phases = {name: wall * share for name, share in shares.items()}
        phases[TRACED] = max(0.0, wall - sum(phases.values()))
        out.append(StepRecord(index=first + i, t=t, wall=wall, phases=phases))
    return tuple(out)


def trace_steps(summary: TraceSummary) -> tuple[StepRecord, ...]:
    """The trace's profiler steps as step records (wall time and data share: the
    step breakdown's DataLoader time, when nothing else ran: what waiting for
    data cost the step; the account's data wait, all of it, is the ledger's)."""
    sb = summary.metrics.step_breakdown
    if sb is None or not sb.step_us or not sb.steps_us:
        return ()
    return _steps(summary, {DATA: min(1.0, max(0.0, sb.dataloader_us / sb.steps_us))})


def trace_rank_steps(summary: TraceSummary) -> tuple[StepRecord, ...]:
    """The trace's profiler steps with the host's own time in phases: the step's
    time account's buckets (data wait, communication, host sync, launch,
    dispatch, Python; docs/analyzer.md), as shares of each step.  What ranks
    are compared by: the step breakdown's data share is data time with the GPU
    idle, and a rank whose GPU spins in NCCL for a slower peer hides its own
    data loading there.  Without an account, :func:`trace_steps`."""
    acct = summary.metrics.account
    if acct is None or acct.step_us <= 0:
        return trace_steps(summary)
    buckets = [b for b in ACCOUNT_BUCKETS if acct.bucket_us(b)]
    return _steps(summary, {b: acct.share(b) for b in buckets})


def trace_capture(summary: TraceSummary) -> CaptureView | None:
    """The trace's tables as a capture the capture rules read."""
    temporal = summary.metrics.temporal
    if temporal is None and not summary.kernels and not summary.cpu_ops:
        return None
    overlap = summary.metrics.comm_compute_overlap_pct
    acct = summary.metrics.account
    # the tables cover the window: the account's steps
    steps = acct.steps if acct is not None and acct.steps else max(1, len(summary.steps))
    # HTA's breakdown leaves the last step out; the tables cover the GPU
    # activities of the window: the span is the one they cover, so that a class's
    # time is a share of it, and busy keeps HTA's ratio (its idle share).
    full = summary.gpu_span_us
    scale = (
        full / temporal.span_us
        if temporal is not None and temporal.span_us > 0 and full is not None and full > 0
        else 1.0
    )
    return CaptureView(
        steps=steps,
        span_us=None if temporal is None else temporal.span_us * scale,
        busy_us=None if temporal is None else (temporal.span_us - temporal.idle_us) * scale,
        kernel_total_us=summary.kernel_total_us,
        kernel_calls=summary.kernel_calls,
        by_class_us=dict(summary.kernel_us_by_class),
        kernels=summary.kernels,
        cpu_ops=summary.cpu_ops,
        comm_compute_overlap=None if overlap is None else overlap / 100.0,
        trace_path=summary.path,
        account=summary.metrics.account,
        markers=summary.metrics.markers,
        op_rows=summary.op_rows,
        marked_steps=summary.window_kind == WINDOW_STEPS,
        tiny_share_counted=_tiny_share(summary),
        comm_kernels=summary.comm_kernels,
        cast_parents=summary.cast_parents,
        op_calls=summary.op_calls,
        collectives=summary.collectives,
    )


def _tiny_share(summary: TraceSummary) -> float | None:
    """The share of the window's kernels under the analyzer's tiny-kernel
    threshold, counted one by one (the trace's count is of those under 10 us:
    None for another threshold, or a window without kernels)."""
    s = summary.sanity
    if not s.kernels_in_window or TINY_KERNEL_US * 1000 != TINY_KERNEL_NS:
        return None
    return s.kernels_under_10us / s.kernels_in_window


def trace_evidence(
    summary: TraceSummary,
    roof: Roof | None = None,
    steps: tuple[StepRecord, ...] | None = None,
    datasheet: Roof | None = None,
) -> JobEvidence:
    """One rank's trace as the job rules' evidence (``steps``: its step records,
    :func:`trace_steps`'s by default; ``datasheet``: the ceilings of the trace's
    GPU by its datasheet)."""
    steps = trace_steps(summary) if steps is None else steps
    return JobEvidence(
        stats=step_stats(steps, exclude_profiled=False),
        steps=steps,
        cuda=summary.gpu_ran,  # (launches whose kernels went unrecorded: a GPU job)
        capture=trace_capture(summary),
        device_total_bytes=summary.device_memory_bytes,
        device_name=summary.device_name,
        from_trace=True,
        compile_share=_window_share(summary, summary.sanity.compile_us),
        cold_launch_share=_window_share(summary, summary.sanity.cold_launch_us),
        records_graphs=summary.sanity.records_graphs,
        blind_wait_share=_window_share(summary, summary.sanity.blind_wait_us),
        capture_share=_window_share(summary, summary.sanity.graph_capture_us),
        setup_share=_window_share(summary, summary.sanity.setup_call_us),
        warmup_share=_window_share(summary, summary.sanity.warmup_us),
        warmup_ops=frozenset(name for name, _n, _us in summary.sanity.warmup_by_name),
        python_frames=tuple(
            (name, _window_share(summary, us)) for name, us in summary.sanity.python_frames
        ),
        python_packages=tuple(
            (name, _window_share(summary, us)) for name, us in summary.sanity.python_packages
        ),
        micro_batches=summary.sanity.micro_batches,
        optimizer_launch_share=summary.sanity.optimizer_launch_share,
        roofline=roofline_of(summary.op_rows, roof),
        compute_capability=summary.compute_capability,
        rocm=summary.rocm,
        launching_ops=frozenset(summary.launching_ops),
        datasheet=datasheet,
    )


def _window_share(summary: TraceSummary, us: float) -> float:
    """``us`` as a share of the trace's window."""
    window = summary.window_us
    if window is None or window[1] <= window[0]:
        return 0.0
    return min(1.0, us / (window[1] - window[0]))


def trace_job_findings(
    summary: TraceSummary, roof: Roof | None = None, datasheet: Roof | None = None
) -> list[Finding]:
    """The analyzer's job rules on one rank's trace (its op rows against ``roof``
    when it has both; costs against a faster kernel from the GPU's
    ``datasheet``), ranked."""
    return engine.analyze(trace_evidence(summary, roof, datasheet=datasheet))


def trace_rank_findings(
    summaries: Sequence[TraceSummary], roofs: Sequence[Roof | None] | None = None
) -> list[Finding]:
    """The rank rules across the traces of one job's ranks (each file a rank its
    ``distributedInfo`` names, one world size, two ranks or more), ranked; none
    for traces that are not the ranks of one job."""
    ranks = [s.rank for s in summaries]
    worlds = {s.world_size for s in summaries}
    if (
        len(summaries) < 2
        or len(set(ranks)) != len(ranks)
        or any(s.rank_from != "distributedInfo" for s in summaries)
        or len(worlds) != 1
    ):
        return []
    roofs = roofs if roofs is not None else [None] * len(summaries)
    members = tuple(
        RankEvidence(pid=s.rank, job=trace_evidence(s, roof, trace_rank_steps(s)), rank=s.rank)
        for s, roof in sorted(zip(summaries, roofs, strict=True), key=lambda p: p[0].rank)
    )
    (world,) = worlds
    return engine.analyze_ranks(RanksEvidence(members, world))
