"""``gputui attach ... --once [--json]``: a hooked job's report, printed.

The report is made of what :class:`gputui.session.oneshot.Collected` folded,
from a live job or from an attach recording.  Every string the job sent is
untrusted: the text report shows it through :func:`gputui.fmt.clean`; the JSON
keeps it exact.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gputui import fmt
from gputui.analysis.finding import Finding
from gputui.analysis.memory import memory_growth
from gputui.analysis.steps import Dist, StepStats
from gputui.collectors.hook_client import (
    CaptureResult,
    MemorySnapshotResult,
)
from gputui.reports import roofline as roofline_text
from gputui.reports.account import lines as account_lines
from gputui.reports.jsondoc import finite
from gputui.session.oneshot import Collected


def report_dict(
    pid: int | None, got: Collected, stats: StepStats, window: int = 1000
) -> dict[str, Any]:
    """The ``--json`` document (docs/json.md: "attach --once --json")."""
    growth = memory_growth(got.memory)
    memory = got.latest_memory
    return finite(
        {
            "pid": pid,
            "hello": got.hello.to_wire(),
            "status": None if got.status is None else got.status.to_wire(),
            "steps_received": len(got.steps),
            "missed": got.missed,
            "stats": stats.as_dict(),
            "memory": None if memory is None else memory.to_wire(),
            "memory_growth": None if growth is None else dataclasses.asdict(growth),
            "capture": None if got.capture is None else got.capture.to_wire(),
            "roofline": None if got.roofline is None else roofline_text.to_json(got.roofline),
            "gpu_samples": len(got.gpu),
            "findings": [f.to_json() for f in got.findings(window)],
            "analysis_notes": got.analysis_notes(stats),
            "memory_snapshot": _memory_snapshot(got.memory_snapshot),
            "problems": list(got.problems),
        }
    )


def _memory_snapshot(result: MemorySnapshotResult | None) -> dict[str, Any] | None:
    """The latest memory snapshot, as ``attach --memory-snapshot --json`` prints it."""
    if result is None:
        return None
    doc = result.to_wire()
    doc.pop("v", None)
    doc.pop("type", None)
    return doc


def print_report(
    got: Collected, stats: StepStats, banner: str | None = None, window: int = 1000
) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(highlight=False)
    if banner:
        console.print(Text(banner, style="bold black on yellow"))
    h = got.hello
    head = Text()
    head.append(f"pid {h.pid}", style="bold")
    head.append("  " + fmt.clean_all(h.argv))
    console.print(head)
    env = f"python {fmt.clean(h.python, 32)}, torch {fmt.clean(h.torch or '-', 64)}"
    if h.cuda:
        env += f" (CUDA {fmt.clean(h.cuda, 32)})"
    if h.device is not None:
        env += f", device {h.device.index} {fmt.clean(h.device.name or '', 128)}"
    if h.rank is not None:
        env += f", rank {h.rank}/{h.world_size} (local {h.local_rank})"
    console.print(Text(env))
    status = got.status
    if status is not None:
        if status.errors:
            console.print(_labelled("hook errors: ", "; ".join(status.errors), "red"))
        if status.phases_coarse:
            console.print(_labelled("coarse phases: ", " ".join(status.coarse_reasons), "yellow"))
    for problem in got.problems[-3:]:
        console.print(_labelled("", problem, "red"))
    if not stats.count:
        left_out = stats.excluded_profiled
        console.print(
            "no steps recorded yet" + (f" ({left_out} profiled steps left out)" if left_out else "")
        )
    else:
        line = (
            f"steps {stats.first_index}..{stats.last_index} ({stats.count}"
            + (f", {stats.excluded_profiled} profiled left out" if stats.excluded_profiled else "")
            + (f", {got.missed} missed" if got.missed else "")
            + f"): {stats.steps_per_s:.2f} steps/s"
        )
        if stats.samples_per_s is not None:
            inferred = " (batch size inferred)" if stats.samples_inferred else ""
            line += f", {stats.samples_per_s:,.0f} samples/s{inferred}"
        console.print(Text(line))
        console.print(_dist_table("wall time (ms)", stats.wall, stats.phases, Table, Text))
        if stats.gpu is not None:
            console.print(_dist_table("GPU time (ms)", stats.gpu, stats.gpu_phases, Table, Text))
    memory = got.latest_memory
    if memory is not None:
        line = (
            f"memory (device {memory.device}): allocated {fmt.size(memory.allocated)}, "
            f"reserved {fmt.size(memory.reserved)}, peak {fmt.size(memory.peak_allocated)}, "
            f"retries {memory.alloc_retries}, OOMs {memory.ooms}"
        )
        growth = memory_growth(got.memory)
        if growth is not None:
            sign = "+" if growth.per_step_bytes >= 0 else "-"
            line += f"; baseline {sign}{fmt.size(abs(growth.per_step_bytes))}/step"
            if growth.growing:
                line += " (GROWING)"
        console.print(Text(line))
    if got.capture is not None:
        _print_capture(console, got.capture, Table, Text)
        if got.roofline is not None:
            console.print(Text("\n".join(roofline_text.lines(got.roofline))))
        elif got.capture.op_rows:
            console.print(Text("roofline: no ceilings known for this GPU: run gputui bench"))
    snap = got.memory_snapshot
    if snap is not None:
        about = Text(
            f"memory snapshot steps {snap.first_step}..{snap.last_step}: "
            f"{len(snap.growing)} growing allocation site(s)"
        )
        if snap.growing and snap.growing[0].site is not None:
            top = snap.growing[0].site
            about.append(f", top {fmt.clean(top.file)}:{top.line}")
        if snap.snapshot_path:
            about.append(f"; file {fmt.clean(snap.snapshot_path)}")
        console.print(about)
    _print_findings(console, got.findings(window), got.analysis_notes(stats))


def _print_findings(console: Any, items: list[Finding], notes: list[str]) -> None:
    from rich.text import Text

    from gputui.reports import findings as findings_text

    head = Text("findings", style="bold")
    head.append(
        f" ({len(items)}, ranked by the step time a fix could recover)"
        if items
        else ": nothing found that costs this job time",
        style="" if items else "green",
    )
    console.print(head)
    for note in notes:
        console.print(Text(f"  ({note})", style="dim"))
    if items:
        console.print(findings_text.blocks(items))


def _labelled(label: str, value: str, style: str) -> Any:
    from rich.text import Text

    text = Text()
    text.append(label, style=style)
    text.append(fmt.clean(value))
    return text


def _dist_table(
    title: str, total: Dist | None, phases: tuple[Dist, ...], table_cls: Any, text_cls: Any
) -> Any:
    table = table_cls(title=title, title_justify="left", box=None, header_style="bold")
    for col in ("phase", "mean", "p50", "p90", "p99", "share"):
        table.add_column(col, justify="left" if col == "phase" else "right")
    rows = list(phases) + ([total] if total is not None else [])
    for d in rows:
        table.add_row(
            text_cls(fmt.clean(d.name, 64)),
            fmt.ms(d.mean, unit=False),
            fmt.ms(d.p50, unit=False),
            fmt.ms(d.p90, unit=False),
            fmt.ms(d.p99, unit=False),
            f"{d.share * 100:.1f}%",
        )
    return table


def _print_capture(console: Any, cap: CaptureResult, table_cls: Any, text_cls: Any) -> None:
    when = " (from an earlier capture)" if cap.replay else ""
    stop = "-" if cap.stop_ms is None else f"{cap.stop_ms:g}"
    console.print(
        text_cls(
            f"capture steps {cap.first_step}..{cap.last_step}{when}: "
            f"{cap.events} events, profiler stop {stop} ms"
        )
    )
    if cap.kernels:
        table = table_cls(
            title="top GPU kernels", title_justify="left", box=None, header_style="bold"
        )
        for col in ("kernel", "class", "calls", "total ms", "mean us", "share"):
            table.add_column(col, justify="left" if col in ("kernel", "class") else "right")
        for k in cap.kernels[:15]:
            table.add_row(
                text_cls(fmt.truncate(fmt.clean(k.name), 70)),
                text_cls(fmt.clean(k.kernel_class, 16)),
                str(k.calls),
                f"{k.total_us / 1000:.3f}",
                f"{k.mean_us:.1f}",
                f"{k.share * 100:.1f}%",
            )
        console.print(table)
    metrics = cap.trace_metrics
    if metrics is not None and metrics.account is not None:
        for line in account_lines(metrics.account, "captured"):
            console.print(text_cls(line))
    g = cap.gpu_time
    if g is not None:
        console.print(
            text_cls(
                f"GPU time: span {g.span_us / 1000:.2f} ms, busy {g.busy_us / 1000:.2f} ms, "
                f"idle {g.idle_us / 1000:.2f} ms; compute {g.compute_us / 1000:.2f}, comm "
                f"{g.communication_us / 1000:.2f}, memcpy {g.memcpy_us / 1000:.2f}, memset "
                f"{g.memset_us / 1000:.2f} ms"
            )
        )
    if cap.cpu_ops:
        table = table_cls(
            title="top CPU ops (self time)", title_justify="left", box=None, header_style="bold"
        )
        for col in ("op", "calls", "self ms", "total ms", "share"):
            table.add_column(col, justify="left" if col == "op" else "right")
        for op in cap.cpu_ops[:15]:
            table.add_row(
                text_cls(fmt.truncate(fmt.clean(op.name), 70)),
                str(op.calls),
                f"{op.self_us / 1000:.3f}",
                f"{op.total_us / 1000:.3f}",
                f"{op.share * 100:.1f}%",
            )
        console.print(table)
    if cap.trace_path:
        line = text_cls("trace: ")
        line.append(fmt.clean(cap.trace_path))
        line.append(" (open in https://ui.perfetto.dev)")
        console.print(line)
    elif cap.trace_error:
        console.print(_labelled("trace not written: ", cap.trace_error, "yellow"))
