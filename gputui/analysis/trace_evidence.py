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

from gputui.analysis import engine
from gputui.analysis.evidence import CaptureView, JobEvidence, roofline_of
from gputui.analysis.finding import Finding
from gputui.analysis.roofline import Roof
from gputui.analysis.steps import step_stats
from gputui.analysis.trace_summary import TraceSummary
from gputui.protocol.messages import DATA
from gputui.protocol.steps import StepRecord

#: the name of a traced step's time outside data loading (no rule reads it)
TRACED = "traced"


def trace_steps(summary: TraceSummary) -> tuple[StepRecord, ...]:
    """The trace's profiler steps as step records (wall time and data share)."""
    sb = summary.metrics.step_breakdown
    if sb is None or not sb.step_us or not sb.steps_us:
        return ()
    data_share = min(1.0, max(0.0, sb.dataloader_us / sb.steps_us))
    first = sb.first_step or 0
    out = []
    t = 0.0
    for i, us in enumerate(sb.step_us):
        wall = us / 1e6
        t += wall
        data = wall * data_share
        out.append(
            StepRecord(index=first + i, t=t, wall=wall, phases={DATA: data, TRACED: wall - data})
        )
    return tuple(out)


def trace_capture(summary: TraceSummary) -> CaptureView | None:
    """The trace's tables as a capture the capture rules read."""
    temporal = summary.metrics.temporal
    if temporal is None and not summary.kernels and not summary.cpu_ops:
        return None
    overlap = summary.metrics.comm_compute_overlap_pct
    steps = max(1, len(summary.steps))
    # HTA's breakdown leaves the last step out; the tables cover every GPU
    # activity of the trace: the span is the one they cover, so that a class's
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
        kernel_calls=summary.gpu_activities,
        by_class_us=dict(summary.kernel_us_by_class),
        kernels=summary.kernels,
        cpu_ops=summary.cpu_ops,
        comm_compute_overlap=None if overlap is None else overlap / 100.0,
        trace_path=summary.path,
        account=summary.metrics.account,
        op_rows=summary.op_rows,
    )


def trace_evidence(summary: TraceSummary, roof: Roof | None = None) -> JobEvidence:
    steps = trace_steps(summary)
    return JobEvidence(
        stats=step_stats(steps, exclude_profiled=False),
        steps=steps,
        cuda=summary.kernel_total_us > 0,
        capture=trace_capture(summary),
        device_total_bytes=summary.device_memory_bytes,
        from_trace=True,
        roofline=roofline_of(summary.op_rows, roof),
        compute_capability=summary.compute_capability,
    )


def trace_job_findings(summary: TraceSummary, roof: Roof | None = None) -> list[Finding]:
    """The analyzer's job rules on one rank's trace (its op rows against ``roof``
    when it has both), ranked."""
    return engine.analyze(trace_evidence(summary, roof))
