"""``gputui analyze PATH... [--json]``: what torch.profiler traces say.

Reads Chrome traces (``export_chrome_trace`` files, ``tensorboard_trace_handler``
directories, ``.json``/``.json.gz``, gputui's own capture traces; several files
are several ranks), and prints per rank: the steps found, the TensorBoard
plugin's step breakdown, Holistic Trace Analysis' temporal and idle breakdowns
and communication overlap, kernel launch statistics, the top kernels and CPU
ops, and the findings of the trace rules.  docs/analyze.md has the definitions.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from gputui import __version__, fmt, roofline_text
from gputui.analysis.evidence import roofline_of
from gputui.analysis.finding import Finding, ranked
from gputui.analysis.roofline import Roof
from gputui.analysis.trace_evidence import trace_job_findings
from gputui.analysis.trace_summary import TraceSummary, summarize, summary_json, trace_findings
from gputui.ceilings.cache import roof_for
from gputui.collectors.trace_file import TraceFile, find_traces, read_trace
from gputui.commands import args as types
from gputui.protocol.trace_metrics import STEP_CATEGORIES
from gputui.trace.kernels import CLASS_LABELS, CLASS_SHORT, short_kernel_name

WIDTH = 100
JSON_VERSION = 1
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


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "analyze",
        help="what torch.profiler traces say (steps, breakdowns, kernels)",
        description="Analyze torch.profiler Chrome traces: trace files, .json.gz files, "
        "tensorboard_trace_handler directories, gputui's capture traces.  Several files "
        "are several ranks.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="a trace file or directory")
    parser.add_argument("--json", action="store_true", help="print JSON (docs/json.md)")
    parser.add_argument(
        "--top",
        type=types.integer(1, 1000),
        default=10,
        metavar="N",
        help="rows in the kernel and CPU-op tables (default 10)",
    )
    parser.add_argument(
        "--include-last-step",
        action="store_true",
        help="keep the last ProfilerStep in the HTA breakdowns (HTA leaves it out by default)",
    )
    parser.set_defaults(func=main)


def _device(tf: TraceFile) -> tuple[str | None, int | None, str | None]:
    """The GPU the trace's activity ran on, as its header describes it."""
    if not tf.devices:
        return None, None, None
    used = Counter(a.device for a in tf.timeline.gpu)
    index = used.most_common(1)[0][0] if used else tf.devices[0].index
    dev = next((d for d in tf.devices if d.index == index), tf.devices[0])
    return dev.name, dev.total_memory_bytes, dev.compute_capability


@contextlib.contextmanager
def _without_cyclic_gc() -> Iterator[None]:
    """A trace becomes millions of small records without cycles: reference
    counting frees them, and the cyclic collector would only walk them again
    and again (about a fifth of the run time on a 50 MB trace)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def load(
    paths: Sequence[str], include_last_step: bool = False, top: int = 30
) -> list[TraceSummary]:
    """Every trace file named by ``paths``, summarized, by rank."""
    with _without_cyclic_gc():
        return _load(find_traces(paths), include_last_step, top)


def _load(files: Sequence[Path], include_last_step: bool, top: int) -> list[TraceSummary]:
    out: list[TraceSummary] = []
    for position, path in enumerate(files):
        tf = read_trace(path)
        name, memory, cc = _device(tf)
        if tf.rank is not None:
            rank, rank_from = tf.rank, "distributedInfo"
        else:
            rank, rank_from = position, "order"
        out.append(
            summarize(
                tf.timeline,
                rank,
                rank_from,
                tf.path,
                world_size=tf.world_size,
                device_name=name,
                device_memory_bytes=memory,
                compute_capability=cc,
                include_last_step=include_last_step,
                top=top,
                op_rows=tf.op_rows,
            )
        )
        del tf  # one file's events at a time
    out.sort(key=lambda s: s.rank)
    return out


def main(args: argparse.Namespace) -> int:
    summaries = load(
        args.paths, args.include_last_step, max(args.top, 30) if args.json else args.top
    )
    roofs = roofs_of(summaries)
    findings = [
        ranked([*trace_findings(s), *trace_job_findings(s, roof)])
        for s, roof in zip(summaries, roofs, strict=True)
    ]
    if args.json:
        ranks = []
        for s, f, roof in zip(summaries, findings, roofs, strict=True):
            doc_rank = summary_json(s, f)
            report = roofline_of(s.op_rows, roof)
            doc_rank["roofline"] = None if report is None else roofline_text.to_json(report)
            ranks.append(doc_rank)
        doc = {"version": JSON_VERSION, "gputui": __version__, "ranks": ranks}
        print(json.dumps(doc, indent=2))
        return 0
    lines: list[str] = []
    for summary, found, roof in zip(summaries, findings, roofs, strict=True):
        if lines:
            lines.append("")
        lines.extend(render(summary, found, args.top, roof))
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


# -- text ---------------------------------------------------------------------------------------
def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}%"


def _count(n: int) -> str:
    return f"{n:,}"


def _steps_text(steps: Sequence[int]) -> str:
    if not steps:
        return "no ProfilerStep marks: the whole trace is one step"
    if len(steps) == 1:
        return f"1 step (ProfilerStep#{steps[0]})"
    return f"{len(steps)} steps (ProfilerStep#{steps[0]}–{steps[-1]})"


def roofs_of(summaries: Sequence[TraceSummary]) -> list[Roof | None]:
    """Each rank's roof: ``gputui bench``'s ceilings of a GPU of the trace's device
    name measured on this machine, else that GPU's datasheet."""
    by_name: dict[str | None, Roof | None] = {}
    for s in summaries:
        if s.device_name not in by_name:
            by_name[s.device_name] = roof_for(None, s.device_name)
    return [by_name[s.device_name] for s in summaries]


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
