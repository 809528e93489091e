"""``gputui attach ... --once [--json]``: a hooked job's report, printed.

The report is made of a :class:`gputui.session.oneshot.JobReport`: what was read
of a live job or of an attach recording, and what the analyzer made of it.
Every string the job sent is untrusted: the text report shows it through
:func:`gputui.fmt.clean`; the JSON keeps it exact.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from gputui import fmt
from gputui.analysis.evidence import MIN_STEPS
from gputui.analysis.finding import Finding
from gputui.analysis.memory import MemoryGrowth
from gputui.analysis.steps import Dist, StepStats
from gputui.protocol.capture import CaptureResult
from gputui.protocol.hello import INFERENCE_CALLS
from gputui.protocol.memsnap import MemorySnapshotResult
from gputui.protocol.schema import MemorySample
from gputui.reports import compile as compile_text
from gputui.reports import findings as findings_text
from gputui.reports import mfu as mfu_text
from gputui.reports import roofline as roofline_text
from gputui.reports.account import lines as account_lines
from gputui.reports.account import live_lines
from gputui.reports.jsondoc import finite, message_body, print_json
from gputui.reports.kernels import kernel_table
from gputui.reports.python import lines as python_lines
from gputui.reports.text import emit, indented_table, output_width, plural, wrap, wrap_items
from gputui.session.autocapture import OFF, REPLACED
from gputui.session.oneshot import JobReport
from gputui.session.reading import Collected


def output(
    report: JobReport, as_json: bool, ascii_only: bool = False, banner: str | None = None
) -> None:
    """The report on standard output: its JSON, or its text to the output's width
    (``--ascii``: ASCII only).  A ``banner`` marks a recording: its paths are the
    recording machine's."""
    if as_json:
        doc = report_dict(report)
        if report.recorded is not None:
            doc["recording"] = {"label": report.recorded.label, "demo": report.recorded.demo}
        print_json(doc)
    else:
        print_report(report, banner, ascii_only)


def report_dict(report: JobReport) -> dict[str, Any]:
    """The ``--json`` document (docs/json.md: "attach --once --json")."""
    got, growth, live, util = (
        report.got,
        report.memory_growth,
        report.live_account,
        report.utilisation,
    )
    memory = got.latest_memory
    doc: dict[str, Any] = finite(
        {
            "pid": report.pid,
            "hello": got.hello.to_wire(),
            "status": None if got.status is None else got.status.to_wire(),
            "steps_received": len(got.steps),
            "missed": got.missed,
            "stats": report.stats.as_dict(),
            "memory": None if memory is None else memory.to_wire(),
            "memory_growth": None if growth is None else dataclasses.asdict(growth),
            "capture": None if got.capture is None else got.capture.to_wire(),
            "roofline": None if report.roofline is None else roofline_text.to_json(report.roofline),
            "utilisation": None if util is None else util.as_dict(),
            "compile": message_body(got.compile_report),
            "compile_note": compile_text.unavailable(got.compile_report, got.status),
            "gpu_samples": len(got.gpu),
            "live_account": None if live is None else live.to_json(),
            "findings": [f.to_json() for f in report.findings],
            "analysis_notes": list(report.notes),
            "memory_snapshot": _memory_snapshot(got.memory_snapshot),
            "python_profile": None if got.python_profile is None else got.python_profile.to_wire(),
            "python_profile_note": got.profile_note,
            "problems": list(got.problems),
        }
    )
    if report.auto_capture is not None:  # a live job's (a recording's report has none)
        doc["auto_capture"] = finite(report.auto_capture.to_json())
    return doc


def _memory_snapshot(result: MemorySnapshotResult | None) -> dict[str, Any] | None:
    """The latest memory snapshot, as ``attach --memory-snapshot --json`` prints it."""
    return message_body(result)


def print_report(report: JobReport, banner: str | None = None, ascii_only: bool = False) -> None:
    """The text report on standard output, to its width (``--ascii``: ASCII only)."""
    emit(render(report, banner, recorded=banner is not None), ascii_only)


def render(
    report: JobReport,
    banner: str | None = None,
    width: int | None = None,
    recorded: bool = False,
) -> list[str]:
    """The report as lines of at most ``width`` characters (the output's width by
    default): sentences wrapped whole, kernel and op names elided in the middle."""
    width = output_width() if width is None else width
    out: list[str] = []
    if banner:
        out.extend(wrap(banner, width))
    got = report.got
    h = got.hello
    out.extend(wrap(f"pid {h.pid}  {fmt.clean_all(h.argv)}", width, "", _TAB))
    env = [f"python {fmt.clean(h.python, 32)},", f"torch {fmt.clean(h.torch or '-', 64)}"]
    if h.cuda:
        env[-1] += f" (CUDA {fmt.clean(h.cuda, 32)})"
    if h.device is not None:
        env[-1] += ","
        env.append(f"device {h.device.index} {fmt.clean(h.device.name or '', 128)}")
    if h.rank is not None:
        env[-1] += ","
        env.append(f"rank {h.rank}/{h.world_size} (local {h.local_rank})")
    out.extend(wrap_items(env, width, " ", subsequent=_TAB))
    status = got.status
    if status is not None:
        if status.errors:
            out.extend(wrap("hook errors: " + fmt.clean("; ".join(status.errors)), width, "", _TAB))
        if status.phases_coarse:
            reasons = fmt.clean(" ".join(status.coarse_reasons))
            out.extend(wrap(f"coarse phases: {reasons}", width, "", _TAB))
        if status.forward_steps:
            out.extend(wrap(FORWARD_STEPS, width, "", _TAB))
    for problem in got.problems[-3:]:
        out.extend(wrap(fmt.clean(problem), width, "", _TAB))
    out.extend(_steps(got, report.stats, width))
    if report.live_account is not None:
        out.extend(
            live_lines(report.live_account, width=width, cuda=h.cuda_in_use, recorded=recorded)
        )
    out.extend(_memory(got.latest_memory, report.memory_growth, width))
    auto = report.auto_capture
    if auto is not None and auto.state not in (OFF, REPLACED):
        out.extend(wrap(auto.text, width, "", _TAB))
    if got.capture is not None:
        out.extend(_capture(got.capture, width, recorded, h.cuda_in_use))
        if report.roofline is not None:
            out.extend(roofline_text.lines(report.roofline, width))
        elif got.capture.op_rows and not h.cuda_in_use:
            out.extend(
                wrap(
                    "roofline: none for a CPU job (its ops ran on the CPU): the step's time "
                    "account and the CPU ops above show where its time goes",
                    width,
                )
            )
        elif got.capture.op_rows:
            out.extend(wrap("roofline: no ceilings known for this GPU: run gputui bench", width))
        if report.utilisation is not None:
            out.extend(wrap(mfu_text.line(report.utilisation), width, "", _TAB))
    if got.compile_report is not None:
        for line in compile_text.lines(got.compile_report):
            out.extend(wrap(line, width, "", _TAB))
    note = compile_text.unavailable(got.compile_report, got.status)
    if note is not None:
        out.extend(wrap(note, width, "", _TAB))
    if got.python_profile is not None:
        out.extend(python_lines(got.python_profile, width, _TAB))
    elif got.profile_note:
        out.extend(wrap(f"Python profile: {fmt.clean(got.profile_note)}", width, "", _TAB))
    snap = got.memory_snapshot
    if snap is not None:
        about = (
            f"memory snapshot steps {snap.first_step}..{snap.last_step}: "
            f"{plural(len(snap.growing), 'growing allocation site')}"
        )
        if snap.growing and snap.growing[0].site is not None:
            top = snap.growing[0].site
            about += f", top {fmt.clean(top.file)}:{top.line}"
        if snap.snapshot_path:
            where = " (on the recording's machine)" if recorded else ""
            about += f"; file{where} {fmt.clean(snap.snapshot_path)}"
        out.extend(wrap(about, width, "", _TAB))
    out.extend(_findings(report.findings, report.notes, width, report.stats.count))
    return out


#: the indent of tables and of a long line's continuation
_TAB = "  "
#: rows in the kernel and CPU-op tables
TOP = 15


#: where steps come from, for a job that has none yet (an inference loop has no
#: optimizer to end them)
STEP_HINT = (
    "a step ends at an optimizer's step(), at each forward call of an inference loop "
    f"(gradients off, from call {INFERENCE_CALLS}), or at gputui.hook.step()"
)


#: how steps are counted in a loop without an optimizer
FORWARD_STEPS = (
    "steps: one per top-level forward call (no optimizer steps, with gradients off: "
    "an inference loop); gputui.hook.step() marks steps of your own"
)


def _steps(got: Collected, stats: StepStats, width: int) -> list[str]:
    if not stats.count:
        left_out = stats.excluded_profiled
        said = "no steps recorded yet" + (
            f" ({plural(left_out, 'profiled step')} left out)" if left_out else ""
        )
        if not left_out:
            said += f": {STEP_HINT}"
        return wrap(said, width, "", _TAB)
    line = (
        f"steps {stats.first_index}..{stats.last_index} ({stats.count:,}"
        + (f", {stats.excluded_profiled:,} profiled left out" if stats.excluded_profiled else "")
        + (f", {stats.excluded_compile:,} compiling left out" if stats.excluded_compile else "")
        + (f", {stats.excluded_warmup:,} warm-up left out" if stats.excluded_warmup else "")
        + (f", {got.missed:,} missed" if got.missed else "")
        + f"): {stats.steps_per_s:.2f} steps/s"
    )
    if stats.samples_per_s is not None:
        inferred = " (batch size inferred)" if stats.samples_inferred else ""
        line += f", {stats.samples_per_s:,.0f} samples/s{inferred}"
    out = wrap(line, width, "", _TAB)
    out.extend(_dist_table("wall time (ms)", stats.wall, stats.phases, width))
    if stats.gpu is not None:
        out.extend(_dist_table("GPU time (ms)", stats.gpu, stats.gpu_phases, width))
    return out


def _memory(memory: MemorySample | None, growth: MemoryGrowth | None, width: int) -> list[str]:
    if memory is None:
        return []
    items = [
        f"memory (device {memory.device}):",
        f"allocated {fmt.size(memory.allocated)},",
        f"reserved {fmt.size(memory.reserved)},",
        f"peak {fmt.size(memory.peak_allocated)},",
        f"retries {memory.alloc_retries},",
        f"OOMs {memory.ooms}",
    ]
    if growth is not None:
        items[-1] += ";"
        items.append(f"baseline {fmt.signed_size(growth.per_step_bytes)}/step")
        if growth.growing:
            items.append("(GROWING)")
    return wrap_items(items, width, " ", subsequent=_TAB)


def _findings(items: Sequence[Finding], notes: Sequence[str], width: int, steps: int) -> list[str]:
    if items:
        head = f"findings ({len(items)}, ranked by the step time a fix could recover)"
    elif steps < MIN_STEPS:  # silent for want of steps (a note says so), not of causes
        head = "findings: none yet"
    else:
        head = "findings: nothing found that costs this job time"
    out = wrap(head, width)
    for note in notes:
        out.extend(wrap(f"({fmt.clean(note)})", width, _TAB, _TAB + " "))
    if items:
        out.extend(findings_text.text_blocks(items, width))
    return out


def _dist_table(title: str, total: Dist | None, phases: tuple[Dist, ...], width: int) -> list[str]:
    rows = [
        [
            fmt.clean(d.name, 64),
            fmt.ms(d.mean, unit=False),
            fmt.ms(d.p50, unit=False),
            fmt.ms(d.p90, unit=False),
            fmt.ms(d.p99, unit=False),
            f"{d.share * 100:.1f}%",
        ]
        for d in [*phases, *([total] if total is not None else [])]
    ]
    right = [False, True, True, True, True, True]
    headers = ["phase", "mean", "p50", "p90", "p99", "share"]
    table = indented_table(headers, rows, width, right=right, flexible=0, optional=(1,))
    return [title, *table]


def _capture(cap: CaptureResult, width: int, recorded: bool, cuda: bool = True) -> list[str]:
    when = " (from an earlier capture)" if cap.replay else ""
    stop = "-" if cap.stop_ms is None else fmt.ms(cap.stop_ms / 1000.0)
    out = wrap(
        f"capture steps {cap.first_step}..{cap.last_step}{when}: "
        f"{plural(cap.events, 'event')}, profiler stop {stop}",
        width,
        "",
        _TAB,
    )
    if cap.kernels:
        out.append("top GPU kernels")
        out.extend(kernel_table(cap.kernels[:TOP], width, _TAB))
    metrics = cap.trace_metrics
    if metrics is not None and metrics.account is not None:
        out.extend(account_lines(metrics.account, "captured", width=width, cuda=cuda))
    g = cap.gpu_time
    if g is not None:
        items = [
            f"GPU time: span {fmt.us(g.span_us)},",
            f"busy {fmt.us(g.busy_us)},",
            f"idle {fmt.us(g.idle_us)};",
            f"compute {fmt.us(g.compute_us)},",
            f"comm {fmt.us(g.communication_us)},",
            f"memcpy {fmt.us(g.memcpy_us)},",
            f"memset {fmt.us(g.memset_us)}",
        ]
        out.extend(wrap_items(items, width, " ", subsequent=_TAB))
    if cap.cpu_ops:
        rows = [
            [
                fmt.us(op.self_us),
                fmt.us(op.total_us),
                f"{op.share * 100:.1f}%",
                f"{op.calls:,}",
                fmt.clean(op.name),
            ]
            for op in cap.cpu_ops[:TOP]
        ]
        out.append("top CPU ops (self time)")
        right = [True, True, True, True, False]
        headers = ["self", "total", "share", "calls", "op"]
        # narrower: calls and total give way to the op's name
        optional = (3, 1)
        out.extend(
            indented_table(
                headers, rows, width, right=right, flexible=4, optional=optional, least=16
            )
        )
    out.extend(trace_lines(cap.trace_path, cap.trace_error, width, recorded))
    return out


def trace_lines(
    path: str | None, error: str | None, width: int, recorded: bool, indent: str = ""
) -> list[str]:
    """Where a capture's trace file is: on this machine, or (a recording) on the
    machine that recorded it."""
    if path:
        if recorded:
            said = f"trace, on the machine that recorded this session: {fmt.clean(path)}"
        else:
            said = f"trace: {fmt.clean(path)} (open in https://ui.perfetto.dev)"
        return wrap(said, width, indent, indent + _TAB)
    if error:
        return wrap(f"trace not written: {fmt.clean(error)}", width, indent, indent + _TAB)
    return []
