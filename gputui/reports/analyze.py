"""``gputui analyze``: the text report of one rank's trace (findings, step
breakdown, HTA's breakdowns, kernels, roofline, CPU ops)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gputui import fmt
from gputui.analysis.diagnosis import Diagnosis
from gputui.analysis.evidence import roofline_of
from gputui.analysis.finding import Finding
from gputui.analysis.mfu import Utilisation
from gputui.analysis.roofline import Roof
from gputui.analysis.trace_summary import TraceSummary
from gputui.protocol.trace_metrics import STEP_CATEGORIES
from gputui.reports import findings as findings_text
from gputui.reports import mfu as mfu_text
from gputui.reports import roofline as roofline_text
from gputui.reports.account import lines as account_lines
from gputui.reports.kernels import kernel_table
from gputui.reports.text import output_width, plural, table, wrap, wrap_items
from gputui.trace.kernels import CLASS_LABELS


# -- text ---------------------------------------------------------------------------------------
def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}%"


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
#: the widest the step breakdown's bars are drawn
BAR_WIDTH = 40
#: the tables' indent
_TAB = "  "


def _count(n: int) -> str:
    return f"{n:,}"


def _steps_text(steps: Sequence[int]) -> str:
    if not steps:
        return "no ProfilerStep marks: the whole trace is one step"
    if len(steps) == 1:
        return f"1 step (ProfilerStep#{steps[0]})"
    return f"{plural(len(steps), 'step')} (ProfilerStep#{steps[0]}–{steps[-1]})"


def render(
    summary: TraceSummary,
    findings: Sequence[Finding] = (),
    top: int = 10,
    roof: Roof | None = None,
    width: int | None = None,
    mfu: tuple[Utilisation | None, str | None] | None = None,
) -> list[str]:
    """The text report of one rank, in lines of at most ``width`` characters (the
    output's width by default): every sentence wrapped whole, long kernel and op
    names elided in the middle.  ``mfu``: the trace's MFU, or why there is none
    (``analysis.mfu.trace_utilisation``)."""
    width = output_width() if width is None else width
    m = summary.metrics
    title = f"rank {summary.rank}" + (f"/{summary.world_size}" if summary.world_size else "")
    out = wrap(f"{title}  {fmt.clean(Path(summary.path).name)}", width, "── ", "   ")
    device = []
    if summary.device_name:
        device.append(fmt.clean(summary.device_name, 60))
    if summary.device_memory_bytes:
        device.append(fmt.size(summary.device_memory_bytes))
    if summary.compute_capability:
        device.append(f"sm {fmt.clean(summary.compute_capability, 8)}")
    head = [", ".join(device)] if device else []
    head.append(plural(summary.events, "event"))
    head.append(plural(summary.gpu_activities, "GPU activity", "GPU activities"))
    out.extend(wrap_items(head, width, " · ", "   "))
    steps = _steps_text(summary.steps)
    if m.last_step_dropped:
        steps += "; HTA's breakdowns leave out the last step"
    out.extend(wrap(steps, width, "   "))
    out.extend(_findings(findings, width))
    if m.account is not None:
        # a trace without GPU kernels is a job on the CPU (as its evidence says)
        cuda = summary.kernel_total_us > 0
        out.extend(["", *account_lines(m.account, width=width, cuda=cuda)])
    out.extend(_step_breakdown(summary, width))
    if mfu is not None:
        out.append("")
        for i, sentence in enumerate(mfu_text.trace_lines(*mfu)):
            out.extend(wrap(sentence, width, _TAB if i else "", _TAB))
    out.extend(_hta(summary, width))
    out.extend(_kernels(summary, top, width))
    out.extend(_roofline(summary, roof, top, width))
    out.extend(_cpu_ops(summary, top, width))
    return out


def render_diagnosis(diagnosis: Diagnosis, width: int | None = None) -> list[str]:
    """The job's one diagnosis across its ranks, first of a report of several."""
    width = output_width() if width is None else width
    return wrap(fmt.clean(diagnosis.sentence()), width, "Job: ", _TAB)


def render_across(findings: Sequence[Finding], width: int | None = None) -> list[str]:
    """The findings of the rank rules across the traces of one job's ranks."""
    width = output_width() if width is None else width
    head = f"Findings across ranks ({len(findings)})"
    return [head, *findings_text.text_blocks(findings, width)]


def _findings(findings: Sequence[Finding], width: int) -> list[str]:
    if not findings:
        return []
    return ["", f"Findings ({len(findings)})", *findings_text.text_blocks(findings, width)]


def _step_breakdown(summary: TraceSummary, width: int) -> list[str]:
    sb = summary.metrics.step_breakdown
    if sb is None:
        return ["", "Step time: no host activity in the trace"]
    per_step = fmt.us(sb.step_us_mean)
    util = _pct(sb.gpu_utilization_pct)
    out = [
        "",
        *wrap(
            f"Step time (TensorBoard plugin's breakdown): {plural(sb.steps, 'step')}, "
            f"{per_step} per step, GPU utilization {util}",
            width,
        ),
    ]
    bar_width = max(0, min(BAR_WIDTH, width - 35))
    for c in STEP_CATEGORIES:
        share = sb.category_pct(c)
        frac = None if share is None else share / 100.0
        bar = fmt.bar(frac, bar_width).rstrip()
        label = _CATEGORY_LABELS[c]
        per_step = fmt.us(sb.category_us(c) / max(sb.steps, 1))
        out.append(f"  {label:<14}{_pct(share):>7}  {per_step:>8}  {bar}".rstrip())
    return out


def _hta(summary: TraceSummary, width: int) -> list[str]:
    m = summary.metrics
    t = m.temporal
    if t is None:
        return ["", *wrap("GPU time: no GPU activity in the trace (a CPU-only profile)", width)]
    shares = [
        f"compute {_pct(t.compute_pct)}",
        f"non-compute {_pct(t.non_compute_pct)}",
        f"idle {_pct(t.idle_pct)}",
    ]
    said: list[str] = []
    ib = m.idle_breakdown
    if ib is not None and ib.idle_us > 0:
        said.append(
            f"gaps between GPU activities: {fmt.us(ib.idle_us)} on "
            f"{plural(len(ib.streams), 'stream')}: host wait {_pct(ib.host_wait_pct)}, "
            f"kernel wait {_pct(ib.kernel_wait_pct)}, other {_pct(ib.other_pct)}"
        )
    if m.comm_compute_overlap_pct is None:
        said.append("communication overlapped by computation: no communication kernels")
    else:
        said.append(f"communication overlapped by computation: {_pct(m.comm_compute_overlap_pct)}")
    ls = m.launch
    if ls is not None:
        said.append(
            f"kernel launches: {_count(ls.launches)}; GPU work shorter than its launch call: "
            f"{_count(ls.short_kernels)} ({_pct(ls.short_kernel_pct)})"
        )
        said.append(
            f"launch calls > 50us: {_count(ls.runtime_outliers)}; launch delay median "
            f"{fmt.us(ls.launch_delay_us_median)}, p95 {fmt.us(ls.launch_delay_us_p95)}, "
            f"> 100us: {_count(ls.launch_delay_outliers)}"
        )
    out = [
        "",
        *wrap(
            f"GPU time (Holistic Trace Analysis' definitions), over {fmt.us(t.span_us)} of GPU "
            "activity",
            width,
        ),
        *wrap_items(shares, width, "   ", _TAB, _TAB * 2),
    ]
    for line in said:
        out.extend(wrap(line, width, _TAB, _TAB * 2))
    return out


def _roofline(summary: TraceSummary, roof: Roof | None, top: int, width: int) -> list[str]:
    if not summary.op_rows:
        if summary.kernel_total_us <= 0:
            return []
        return [
            "",
            *wrap(
                "Roofline: the trace has no input shapes (profile with record_shapes=True and "
                "with_flops=True)",
                width,
            ),
        ]
    report = roofline_of(summary.op_rows, roof)
    if report is None:
        device = fmt.clean(summary.device_name or "an unnamed GPU", 60)
        return [
            "",
            *wrap(f"Roofline: no ceilings known for {device}: run gputui bench on it", width),
        ]
    return ["", *roofline_text.lines(report, width, top)]


def _kernels(summary: TraceSummary, top: int, width: int) -> list[str]:
    if not summary.kernels:
        return []
    out = [
        "",
        *wrap(
            f"Top GPU activities (whole trace: {fmt.us(summary.kernel_total_us)} in "
            f"{plural(summary.kernel_names, 'name')})",
            width,
        ),
    ]
    by_class = [
        f"{CLASS_LABELS.get(c, fmt.clean(c, 20))} {100.0 * us / summary.kernel_total_us:.0f}%"
        for c, us in summary.kernel_us_by_class.items()
        if summary.kernel_total_us > 0
    ]
    if by_class:
        items = [f"{item}," for item in by_class[:-1]] + by_class[-1:]
        out.extend(wrap_items(items, width, " ", _TAB))
    out.extend(kernel_table(summary.kernels[:top], width, _TAB, upper=True))
    return out


def _cpu_ops(summary: TraceSummary, top: int, width: int) -> list[str]:
    if not summary.cpu_ops:
        return []
    out = [
        "",
        *wrap(
            f"Top CPU ops by self time (whole trace: {fmt.us(summary.cpu_self_total_us)})", width
        ),
    ]
    rows = [
        [
            fmt.us(o.self_us),
            _pct(100.0 * o.share),
            _count(o.calls),
            fmt.us(o.mean_self_us),
            fmt.clean(o.name),
        ]
        for o in summary.cpu_ops[:top]
    ]
    lines = table(
        ["SELF", "SHARE", "CALLS", "MEAN", "OP"],
        rows,
        width - len(_TAB),
        right=[True, True, True, True, False],
        flexible=4,
        optional=(2, 3),  # narrower: calls and mean give way to the op's name
        least=16,
    )
    out.extend(_TAB + line for line in lines)
    return out
