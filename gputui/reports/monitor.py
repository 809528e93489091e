"""One-shot output: ``gputui --once`` (Rich, fits 80 columns).

``--json`` is written by :func:`gputui.snapshot.codec.print_document`, without Rich."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from gputui import fmt
from gputui.analysis import monitor_findings, throttle
from gputui.analysis.finding import Finding
from gputui.collectors.source import SnapshotSource
from gputui.reports import findings as findings_text
from gputui.snapshot.model import DeviceSnapshot, Snapshot

#: how a throttle flag is coloured inline (findings use findings_text's styles)
SEVERITY_STYLE = {"crit": "bold red", "warn": "bold yellow", "info": "dim"}


def print_snapshot(
    snapshot: Snapshot,
    source: SnapshotSource,
    banner: str | None,
    ascii_only: bool = False,
    console: Console | None = None,
    instant: bool = False,
) -> None:
    console = console or Console(width=min(Console().width, 100))
    console.print(render(snapshot, source, banner, ascii_only, instant))


#: said under the devices when a live snapshot was taken without --window
RATES_HINT = "Rates (GPM activity, PCIe, CPU %) need a window: gputui --once --window 0.2"


def render(
    snapshot: Snapshot,
    source: SnapshotSource,
    banner: str | None,
    ascii_only: bool = False,
    instant: bool = False,
) -> Group:
    """The whole snapshot as Rich renderables; every line fits 80 columns.

    ``instant``: a live snapshot of one reading, so it has no rates; a line says
    how to get them.
    """
    box_style = box.ASCII if ascii_only else box.SIMPLE_HEAD
    parts: list[Any] = []
    if banner:
        parts.append(Text(banner, style="bold black on yellow"))
    parts.append(_header(snapshot))
    if snapshot.error:
        parts.append(Text(f"! {fmt.clean(snapshot.error)}", style="bold red"))
    parts.append(_devices(snapshot, box_style, ascii_only))
    for device in snapshot.devices:
        line = None if device.lost else _state_line(device, ascii_only, instant)
        if line is not None:
            parts.append(line)
    if instant and snapshot.devices:
        parts.append(Text(RATES_HINT, style="dim"))
    parts.append(_processes(snapshot, box_style))
    parts.append(_host(snapshot))
    parts.append(_findings(monitor_findings.findings(snapshot)))
    return Group(*parts)


def _findings(items: list[Finding]) -> Text:
    if not items:
        return Text("Findings: nothing to report", style="dim")
    text = Text(f"Findings ({len(items)})", style="bold")
    text.append("\n")
    text.append_text(findings_text.blocks(items))
    return text


def _header(s: Snapshot) -> Text:
    when = fmt.clock(s.timestamp_s, with_date=True)
    text = Text()
    text.append(fmt.clean(s.host.hostname or "?", 128), style="bold")
    text.append(f"  {when}")
    driver = fmt.clean(s.driver_version, 64)
    text.append(f"  driver {driver}  CUDA {fmt.clean(s.cuda_driver_version, 64)}")
    if s.sample_latency_ms is not None:
        text.append(f"  sampled in {s.sample_latency_ms:.1f} ms", style="dim")
    return text


def _devices(s: Snapshot, box_style: box.Box, ascii_only: bool) -> Table:
    table = Table(box=box_style, pad_edge=False, expand=False, show_edge=False)
    table.add_column("GPU", justify="right", no_wrap=True)
    table.add_column("Name", no_wrap=True, max_width=22)
    table.add_column("Util", justify="right", no_wrap=True)
    table.add_column("Memory", justify="right", no_wrap=True)
    table.add_column("Temp", justify="right", no_wrap=True)
    table.add_column("Power", justify="right", no_wrap=True)
    table.add_column("SM clk", justify="right", no_wrap=True)
    for d in s.devices:
        if d.lost:
            table.add_row(
                str(d.index),
                Text(f"{fmt.gpu_name(d.name)} LOST", style="bold red"),
                "",
                "",
                "",
                "",
                "",
            )
            continue
        mem = f"{fmt.size(d.mem_used_bytes)}/{fmt.size(d.mem_total_bytes)}"
        power = f"{fmt.watts(d.power_w)}/{fmt.watts(d.power_limit_w)}"
        table.add_row(
            str(d.index),
            Text(fmt.gpu_name(d.name)),
            fmt.pct(d.util_gpu_pct),
            mem,
            fmt.temp(d.temp_gpu_c),
            power,
            fmt.mhz(d.clock_sm_mhz),
        )
    return table


def _state_line(d: DeviceSnapshot, ascii_only: bool, instant: bool = False) -> Text | None:
    """What plain utilization hides: GPM activity, throttling, errors (None when
    an instant snapshot has nothing of these to say)."""
    text = Text(f"GPU {d.index}  ", style="bold")
    empty = len(text)
    g = d.gpm
    if g is not None:
        text.append(
            f"SM {fmt.pct(g.sm_activity_pct)}  occ {fmt.pct(g.sm_occupancy_pct)}  "
            f"tensor {fmt.pct(g.tensor_activity_pct)}  DRAM {fmt.pct(g.dram_bw_util_pct)}",
            style="cyan",
        )
    elif d.gpm_supported is False and not instant:
        text.append("GPM metrics unavailable on this GPU", style="dim")
    if d.pcie_tx_bytes_per_s is not None or d.pcie_rx_bytes_per_s is not None:
        up, down = ("tx ", " rx ") if ascii_only else ("↑", " ↓")
        text.append(
            f"  PCIe {up}{fmt.rate(d.pcie_tx_bytes_per_s)}{down}{fmt.rate(d.pcie_rx_bytes_per_s)}"
        )
    costly = throttle.costly(d.throttle_reasons)
    if costly:
        flags = ",".join(t.flag for t in costly)
        text.append(f"  {flags}", style=SEVERITY_STYLE[throttle.worst(costly) or "warn"])
    if d.ecc_errors_uncorrected:
        text.append(f"  ECC uncorrected {d.ecc_errors_uncorrected}", style="bold red")
    if instant and len(text) == empty:
        return None
    return text


def _processes(s: Snapshot, box_style: box.Box) -> Table | Text:
    if not s.processes:
        return Text("No GPU processes.", style="dim")
    table = Table(box=box_style, pad_edge=False, show_edge=False)
    table.add_column("GPU", justify="right", no_wrap=True)
    table.add_column("PID", justify="right", no_wrap=True)
    table.add_column("User", no_wrap=True, max_width=8)
    table.add_column("GPU mem", justify="right", no_wrap=True)
    table.add_column("SM", justify="right", no_wrap=True)
    table.add_column("CPU", justify="right", no_wrap=True)
    table.add_column("Time", justify="right", no_wrap=True)
    table.add_column("Command", no_wrap=True, overflow="ellipsis", max_width=30)
    rows = sorted(s.processes, key=lambda p: (p.gpu_index, -(p.gpu_mem_bytes or 0), p.pid))
    for p in rows:
        runtime = None if p.start_time_s is None else s.timestamp_s - p.start_time_s
        pid = f"{p.pid}*" if p.hooked else str(p.pid)
        kind = "" if p.type == "compute" else f" [{p.type[0].upper()}]"
        table.add_row(
            str(p.gpu_index),
            pid,
            Text(fmt.clean(p.user, 64)),
            fmt.size(p.gpu_mem_bytes),
            fmt.pct(p.sm_pct),
            fmt.pct(p.cpu_pct),
            fmt.duration(runtime),
            Text(fmt.command(p.cmdline, p.name, 300) + kind),
        )
    if any(p.hooked for p in rows):
        table.caption = "* carries the gputui hook: gputui attach PID"
    return table


def _host(s: Snapshot) -> Text:
    h = s.host
    load = (
        fmt.NA if h.load_1 is None else f"{h.load_1:.2f} {h.load_5 or 0:.2f} {h.load_15 or 0:.2f}"
    )
    return Text(
        f"Host CPU {fmt.pct(h.cpu_pct)} ({h.cpu_count or '?'} cores)  "
        f"mem {fmt.size(h.mem_used_bytes)}/{fmt.size(h.mem_total_bytes)}  "
        f"swap {fmt.size(h.swap_used_bytes)}/{fmt.size(h.swap_total_bytes)}\n"
        f"     load {load}  up {fmt.duration(h.uptime_s)}"
    )
