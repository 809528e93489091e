"""``gputui analyze``: the text report of one rank's trace (findings, step
breakdown, HTA's breakdowns, kernels, roofline, CPU ops)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gputui import fmt
from gputui.analysis.evidence import roofline_of
from gputui.analysis.finding import Finding
from gputui.analysis.roofline import Roof
from gputui.analysis.trace_summary import TraceSummary
from gputui.protocol.trace_metrics import STEP_CATEGORIES
from gputui.reports import roofline as roofline_text
from gputui.reports.account import lines as account_lines
from gputui.trace.kernels import CLASS_LABELS, CLASS_SHORT, short_kernel_name


# -- text ---------------------------------------------------------------------------------------
def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}%"


#: the report's width in columns
WIDTH = 100
_CATEGORY_LABELS = {
    "kernel": "kernel",
    "memcpy": "memcpy",
    "memset": "memset",
    "communication": "communication",
    "runtime": "CUDA runtime",
    "dataloader": "DataLoader",
    "cpu_op": "CPU op",
    "other": "other",
}


def _count(n: int) -> str:
    return f"{n:,}"


def _steps_text(steps: Sequence[int]) -> str:
    if not steps:
        return "no ProfilerStep marks: the whole trace is one step"
    if len(steps) == 1:
        return f"1 step (ProfilerStep#{steps[0]})"
    return f"{len(steps)} steps (ProfilerStep#{steps[0]}–{steps[-1]})"


def render(
    summary: TraceSummary,
    findings: Sequence[Finding] = (),
    top: int = 10,
    roof: Roof | None = None,
) -> list[str]:
    """The text report of one rank, in at most :data:`WIDTH` columns."""
    m = summary.metrics
    title = f"rank {summary.rank}" + (f"/{summary.world_size}" if summary.world_size else "")
    path = fmt.middle(fmt.clean(Path(summary.path).name), WIDTH - len(title) - 4)
    out = [f"── {title}  {path}"]
    device = []
    if summary.device_name:
        device.append(fmt.clean(summary.device_name, 60))
    if summary.device_memory_bytes:
        device.append(fmt.size(summary.device_memory_bytes))
    if summary.compute_capability:
        device.append(f"sm {fmt.clean(summary.compute_capability, 8)}")
    head = [", ".join(device)] if device else []
    head.append(f"{_count(summary.events)} events")
    head.append(f"{_count(summary.gpu_activities)} GPU activities")
    out.append("   " + " · ".join(head))
    steps = _steps_text(summary.steps)
    if m.last_step_dropped:
        steps += "; HTA's breakdowns leave out the last step"
    out.append("   " + steps)
    out.extend(_findings(findings))
    if m.account is not None:
        out.extend(["", *account_lines(m.account)])
    out.extend(_step_breakdown(summary))
    out.extend(_hta(summary))
    out.extend(_kernels(summary, top))
    out.extend(_roofline(summary, roof, top))
    out.extend(_cpu_ops(summary, top))
    return [line[:WIDTH].rstrip() for line in out]


def _findings(findings: Sequence[Finding]) -> list[str]:
    if not findings:
        return []
    out = ["", "Findings"]
    for f in findings:
        impact = "" if f.impact_pct is None else f"  ~{f.impact_pct:.0f}% of step time"
        out.append(f"  {f.severity:<5} {fmt.truncate(fmt.clean(f.title), WIDTH - 30)}{impact}")
        out.append(f"        {fmt.truncate(fmt.clean(f.evidence), WIDTH - 8)}")
        out.append(f"        fix: {fmt.truncate(fmt.clean(f.fix), WIDTH - 13)}")
    return out


def _step_breakdown(summary: TraceSummary) -> list[str]:
    sb = summary.metrics.step_breakdown
    if sb is None:
        return ["", "Step time: no host activity in the trace"]
    per_step = fmt.us(sb.step_us_mean)
    util = _pct(sb.gpu_utilization_pct)
    out = [
        "",
        f"Step time (TensorBoard plugin's breakdown): {sb.steps} steps, {per_step} per step, "
        f"GPU utilization {util}",
    ]
    for c in STEP_CATEGORIES:
        share = sb.category_pct(c)
        frac = None if share is None else share / 100.0
        bar = fmt.bar(frac, 40).rstrip()
        label = _CATEGORY_LABELS[c]
        per_step = fmt.us(sb.category_us(c) / max(sb.steps, 1))
        out.append(f"  {label:<14}{_pct(share):>7}  {per_step:>8}  {bar}")
    return out


def _hta(summary: TraceSummary) -> list[str]:
    m = summary.metrics
    t = m.temporal
    if t is None:
        return ["", "GPU time: no GPU activity in the trace (a CPU-only profile)"]
    out = [
        "",
        f"GPU time (Holistic Trace Analysis' definitions), over {fmt.us(t.span_us)} of GPU "
        "activity",
        f"  compute {_pct(t.compute_pct)}   non-compute {_pct(t.non_compute_pct)}   "
        f"idle {_pct(t.idle_pct)}",
    ]
    ib = m.idle_breakdown
    if ib is not None and ib.idle_us > 0:
        streams = len(ib.streams)
        out.append(
            f"  gaps between GPU activities: {fmt.us(ib.idle_us)} on {streams} "
            f"stream{'s' if streams != 1 else ''}: host wait {_pct(ib.host_wait_pct)}, "
            f"kernel wait {_pct(ib.kernel_wait_pct)}, other {_pct(ib.other_pct)}"
        )
    if m.comm_compute_overlap_pct is None:
        out.append("  communication overlapped by computation: no communication kernels")
    else:
        out.append(f"  communication overlapped by computation: {_pct(m.comm_compute_overlap_pct)}")
    ls = m.launch
    if ls is not None:
        out.append(
            f"  kernel launches: {_count(ls.launches)}; GPU work shorter than its launch call: "
            f"{_count(ls.short_kernels)} ({_pct(ls.short_kernel_pct)})"
        )
        out.append(
            f"  launch calls > 50us: {_count(ls.runtime_outliers)}; launch delay median "
            f"{fmt.us(ls.launch_delay_us_median)}, p95 {fmt.us(ls.launch_delay_us_p95)}, "
            f"> 100us: {_count(ls.launch_delay_outliers)}"
        )
    return out


def _roofline(summary: TraceSummary, roof: Roof | None, top: int) -> list[str]:
    if not summary.op_rows:
        if summary.kernel_total_us <= 0:
            return []
        return [
            "",
            "Roofline: the trace has no input shapes (profile with record_shapes=True and "
            "with_flops=True)",
        ]
    report = roofline_of(summary.op_rows, roof)
    if report is None:
        device = fmt.clean(summary.device_name or "an unnamed GPU", 60)
        return ["", f"Roofline: no ceilings known for {device}: run gputui bench on it"]
    return ["", *roofline_text.lines(report, WIDTH, top)]


def _kernels(summary: TraceSummary, top: int) -> list[str]:
    if not summary.kernels:
        return []
    out = [
        "",
        f"Top GPU activities (whole trace: {fmt.us(summary.kernel_total_us)} in "
        f"{_count(summary.kernel_names)} names)",
    ]
    by_class = [
        f"{CLASS_LABELS.get(c, fmt.clean(c, 20))} {100.0 * us / summary.kernel_total_us:.0f}%"
        for c, us in summary.kernel_us_by_class.items()
        if summary.kernel_total_us > 0
    ]
    if by_class:
        out.append("  " + fmt.truncate(", ".join(by_class), WIDTH - 2))
    name_width = WIDTH - 46
    out.append(f"  {'TIME':>8} {'SHARE':>6} {'CALLS':>7} {'MEAN':>8} {'CLASS':<7}  KERNEL")
    for k in summary.kernels[:top]:
        name = fmt.truncate(fmt.clean(short_kernel_name(k.name)), name_width)
        cls = CLASS_SHORT.get(k.kernel_class, fmt.clean(k.kernel_class, 7))
        out.append(
            f"  {fmt.us(k.total_us):>8} {_pct(100.0 * k.share):>6} {_count(k.calls):>7} "
            f"{fmt.us(k.mean_us):>8} {cls:<7}  {name}"
        )
    return out


def _cpu_ops(summary: TraceSummary, top: int) -> list[str]:
    if not summary.cpu_ops:
        return []
    out = [
        "",
        f"Top CPU ops by self time (whole trace: {fmt.us(summary.cpu_self_total_us)})",
        f"  {'SELF':>8} {'SHARE':>6} {'CALLS':>7} {'MEAN':>8}  OP",
    ]
    name_width = WIDTH - 37
    for o in summary.cpu_ops[:top]:
        out.append(
            f"  {fmt.us(o.self_us):>8} {_pct(100.0 * o.share):>6} {_count(o.calls):>7} "
            f"{fmt.us(o.mean_self_us):>8}  {fmt.truncate(fmt.clean(o.name), name_width)}"
        )
    return out
