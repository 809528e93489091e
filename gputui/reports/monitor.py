"""One-shot output: ``gputui --once``, plain text to the output's width.

``--json`` is written by :func:`gputui.snapshot.codec.print_document`."""

from __future__ import annotations

import heapq

from gputui import fmt
from gputui.analysis import monitor_findings, throttle
from gputui.analysis.finding import Finding
from gputui.reports import findings as findings_text
from gputui.reports.text import (
    elide_all,
    emit,
    insert_columns,
    output_height,
    output_width,
    plural,
    table,
    wrap,
    wrap_items,
)
from gputui.snapshot.model import (
    DeviceSnapshot,
    ProcessSnapshot,
    Snapshot,
    any_in_job,
    any_placed,
)
from gputui.sources.base import SnapshotSource


def print_snapshot(
    snapshot: Snapshot,
    source: SnapshotSource,
    banner: str | None,
    ascii_only: bool = False,
    instant: bool = False,
    rows: int | None = None,
    every_row: bool = False,
) -> None:
    """The report on standard output.  Process rows: ``rows`` when given, all of
    them with ``every_row`` or into a pipe, else as many as the terminal holds."""
    height = None if every_row or rows is not None else output_height()
    emit(
        render(snapshot, source, banner, ascii_only, instant, rows=rows, height=height), ascii_only
    )


#: said under the devices when a live snapshot was taken without --window
RATES_HINT = "Rates (GPM activity, PCIe, CPU %) need a window: gputui --once --window 0.2"
#: under the processes when one of them carries the hook
HOOK_NOTE = "* carries the gputui hook: gputui attach PID"
#: the widest a user name is shown (elided in the middle beyond)
USER_WIDTH = 12
#: fitting a terminal, at least this many process rows are shown however tall the rest
MIN_FIT_ROWS = 5
#: lines around the process rows: the table's header and rule, the "more" line,
#: the hook note, and the shell's prompt after the report
FIT_MARGIN = 5
#: below this output width a container or pod is shown in 12 characters at most
WIDE_CONTAINER_OUTPUT = 100


def render(
    snapshot: Snapshot,
    source: SnapshotSource,
    banner: str | None,
    ascii_only: bool = False,
    instant: bool = False,
    width: int | None = None,
    rows: int | None = None,
    height: int | None = None,
) -> list[str]:
    """The whole snapshot as lines of at most ``width`` characters (the output's
    width by default).

    ``instant``: a live snapshot of one reading, so it has no rates; a line says
    how to get them.  ``rows``: at most that many process rows; ``height``: as
    many as let the report fit that many lines (at least ``MIN_FIT_ROWS``); the
    rest are counted on a line under the table.
    """
    width = output_width() if width is None else width
    rule = "-" if ascii_only else "─"
    out: list[str] = []
    if banner:
        out.extend(wrap(banner, width))
    out.extend(_header(snapshot, width))
    if snapshot.error:
        out.extend(wrap(f"! {fmt.clean(snapshot.error)}", width, "", "  "))
    out.extend(_devices(snapshot, width, rule))
    for device in snapshot.devices:
        if not device.lost:
            out.extend(_state_line(device, width, ascii_only, instant))
        elif device.xid_errors:  # what a lost GPU's driver said of it
            out.extend(_xid_line(device, width))
    if instant and snapshot.devices:
        out.extend(wrap(RATES_HINT, width))
    after = [
        *_host(snapshot, width),
        *_findings(monitor_findings.findings(snapshot), width),
    ]
    if height is not None and rows is None:
        rows = max(MIN_FIT_ROWS, height - len(out) - len(after) - FIT_MARGIN)
    out.extend(_processes(snapshot, width, rule, first_recorded=source.is_recording, rows=rows))
    out.extend(after)
    return out


def _findings(items: list[Finding], width: int) -> list[str]:
    if not items:
        return ["Findings: nothing to report"]
    return [f"Findings ({len(items)})", *findings_text.text_blocks(items, width)]


def _header(s: Snapshot, width: int) -> list[str]:
    items = [
        fmt.clean(s.host.hostname or "?", 128),
        fmt.clock(s.timestamp_s, with_date=True),
        f"driver {fmt.clean(s.driver_version, 64)}",
        f"CUDA {fmt.clean(s.cuda_driver_version, 64)}",
    ]
    if s.sample_latency_ms is not None:
        latency = fmt.ms(s.sample_latency_ms / 1000, decimals=1, space=True)
        items.append(f"sampled in {latency}")
    return wrap_items(items, width)


def _devices(s: Snapshot, width: int, rule: str) -> list[str]:
    rows = []
    for d in s.devices:
        if d.lost:
            rows.append([str(d.index), f"{fmt.gpu_name(d.name)} LOST", "", "", "", "", ""])
            continue
        rows.append(
            [
                str(d.index),
                fmt.gpu_name(d.name),
                fmt.pct(d.util_gpu_pct),
                f"{fmt.size(d.mem_used_bytes)}/{fmt.size(d.mem_total_bytes)}",
                fmt.temp(d.temp_gpu_c),
                f"{fmt.watts(d.power_w)}/{fmt.watts(d.power_limit_w)}",
                fmt.mhz(d.clock_sm_mhz),
            ]
        )
    return table(
        ["GPU", "Name", "Util", "Memory", "Temp", "Power", "SM clk"],
        rows,
        width,
        right=[True, False, True, True, True, True, True],
        flexible=1,
        rule=rule,
        optional=(6,),  # the SM clock; narrower, a GPU's values on lines of their own
    )


def _state_line(d: DeviceSnapshot, width: int, ascii_only: bool, instant: bool) -> list[str]:
    """What plain utilization hides: GPM activity, throttling, errors (nothing
    when an instant snapshot has nothing of these to say)."""
    items: list[str] = []
    g = d.gpm
    if g is not None:
        items += [
            f"SM {fmt.pct(g.sm_activity_pct)}",
            f"occ {fmt.pct(g.sm_occupancy_pct)}",
            f"tensor {fmt.pct(g.tensor_activity_pct)}",
            f"DRAM {fmt.pct(g.dram_bw_util_pct)}",
        ]
    elif d.gpm_supported is False and not instant:
        items.append("GPM metrics unavailable on this GPU")
    if d.pcie_tx_bytes_per_s is not None or d.pcie_rx_bytes_per_s is not None:
        up, down = ("tx ", "rx ") if ascii_only else ("↑", "↓")
        items.append(
            f"PCIe {up}{fmt.rate(d.pcie_tx_bytes_per_s)} {down}{fmt.rate(d.pcie_rx_bytes_per_s)}"
        )
    costly = throttle.costly(d.throttle_reasons)
    if costly:
        items.append(",".join(t.flag for t in costly))
    if d.ecc_errors_uncorrected:
        items.append(f"ECC uncorrected {d.ecc_errors_uncorrected}")
    if d.xid_errors or d.xid_sources == ():  # the Xid text (its module loads only then)
        from gputui.session import xid_text

        said = xid_text.line(d, with_date=True)
        items.append(said if said is not None else xid_text.NOT_WATCHED)
    if not items:
        return []
    return wrap_items([f"GPU {d.index}", *items], width, subsequent="       ")


def _xid_line(d: DeviceSnapshot, width: int) -> list[str]:
    from gputui.session import xid_text

    said = xid_text.line(d, with_date=True)
    if said is None:
        return []
    return wrap_items([f"GPU {d.index}", said], width, subsequent="       ")


def _sm(p: ProcessSnapshot, first_recorded: bool) -> str:
    """A process's SM %: N/A where NVML had no sample of it.  ``first_recorded``:
    the snapshot is a recording's first (``--once`` prints no other), taken on its
    recorder's first NVML read, which has no per-process sample yet; recorders
    wrote 0 there before they wrote null, so 0 there is not a measurement."""
    if p.sm_pct is None or (first_recorded and p.sm_pct == 0 and not p.mem_bw_pct):
        return fmt.NA
    return fmt.pct(p.sm_pct)


def _processes(
    s: Snapshot, width: int, rule: str, first_recorded: bool, rows: int | None = None
) -> list[str]:
    if not s.processes:
        return ["No GPU processes."]
    if rows is not None and rows < len(s.processes):
        # the rows that use the most GPU memory, shown in the usual order
        procs = sorted(heapq.nsmallest(rows, s.processes, key=_biggest), key=_order)
    else:
        procs = sorted(s.processes, key=_order)
    users = elide_all({fmt.clean(p.user, 64) for p in procs}, USER_WIDTH)
    placed = any_placed(procs)
    labels: dict[str, str] = {}
    if placed:  # the container column (its module loads only then)
        from gputui.session import container_text

        # narrow outputs: a shorter container, and the running time goes first
        fit = container_text.LABEL_WIDTH if width >= WIDE_CONTAINER_OUTPUT else 12
        labels = elide_all({container_text.label(p) for p in procs}, fit)
    in_job = any_in_job(procs)
    jobs: dict[str, str] = {}
    if in_job:  # the Slurm job column (its module loads only then)
        from gputui.session import slurm_text

        fit = slurm_text.LABEL_WIDTH if width >= WIDE_CONTAINER_OUTPUT else 12
        jobs = elide_all({slurm_text.label(p) for p in procs}, fit)
    cells = []
    for p in procs:
        runtime = None if p.start_time_s is None else s.timestamp_s - p.start_time_s
        kind = "" if p.type == "compute" else f" [{p.type[0].upper()}]"
        cells.append(
            [
                str(p.gpu_index),
                f"{p.pid}*" if p.hooked else str(p.pid),
                users[fmt.clean(p.user, 64)],
                fmt.size(p.gpu_mem_bytes),
                _sm(p, first_recorded),
                fmt.pct(p.cpu_pct),
                fmt.duration(runtime),
                fmt.command(p.cmdline, p.name, 300) + kind,
            ]
        )
        if placed:
            cells[-1].insert(7, labels[container_text.label(p)])
        if in_job:
            cells[-1].insert(-1, jobs[slurm_text.label(p)])
    headers = ["GPU", "PID", "User", "GPU mem", "SM", "CPU", "Time", "Command"]
    right = [True, True, False, True, True, True, True, False]
    insert_columns(headers, right, (placed, 7, "Container"), (in_job, -1, "Job"))
    out = table(
        headers,
        cells,
        width,
        right=right,
        flexible=len(headers) - 1,
        rule=rule,
        # narrower outputs leave out the running time, then CPU and SM shares
        optional=tuple(headers.index(h) for h in ("Time", "CPU", "SM")),
    )
    left = len(s.processes) - len(procs)
    if left:
        shown = {(p.gpu_uuid, p.pid) for p in procs}
        memory = sum(p.gpu_mem_bytes or 0 for p in s.processes if (p.gpu_uuid, p.pid) not in shown)
        out.extend(
            wrap(
                f"and {plural(left, 'more process', 'more processes')} "
                f"(their GPU memory: {fmt.size(memory)}); --all shows every row",
                width,
            )
        )
    if any(p.hooked for p in procs):
        # the command whole on one line
        note, command = HOOK_NOTE.split(": ", 1)
        out.extend(wrap_items([f"{note}:", command], width, " ", subsequent="  "))
    if any(p.pid_is_host for p in procs):
        from gputui.host.pid_namespace import UNMAPPED_NOTE
        from gputui.session import container_text

        out.extend(wrap(f"{container_text.HOST_PID}: {UNMAPPED_NOTE}", width))
    return out


def _order(p: ProcessSnapshot) -> tuple[int, int, int]:
    return (p.gpu_index, -(p.gpu_mem_bytes or 0), p.pid)


def _biggest(p: ProcessSnapshot) -> tuple[int, int, int]:
    return (-(p.gpu_mem_bytes or 0), p.gpu_index, p.pid)


def _host(s: Snapshot, width: int) -> list[str]:
    h = s.host
    load = (
        fmt.NA if h.load_1 is None else f"{h.load_1:.2f} {h.load_5 or 0:.2f} {h.load_15 or 0:.2f}"
    )
    items = [
        f"Host CPU {fmt.pct(h.cpu_pct)} ({h.cpu_count or '?'} cores)",
        f"mem {fmt.size(h.mem_used_bytes)}/{fmt.size(h.mem_total_bytes)}",
        f"swap {fmt.size(h.swap_used_bytes)}/{fmt.size(h.swap_total_bytes)}",
    ]
    return [
        *wrap_items(items, width, subsequent="     "),
        *wrap_items([f"load {load}", f"up {fmt.duration(h.uptime_s)}"], width, indent="     "),
    ]
