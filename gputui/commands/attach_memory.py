"""``gputui attach PID --memory-snapshot N [--json]``: record a hooked job's CUDA
allocation history for N steps and print the hook's summary.

The job does the work (``gputui.hook._memsnap``); this waits for its result with
a timeout and prints it.  Every string in it comes from the job (file names,
function names): the text report cleans them; the JSON keeps them exact.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from gputui import fmt
from gputui.analysis.engine import analyze
from gputui.analysis.evidence import job_evidence
from gputui.analysis.finding import Finding
from gputui.analysis.rules.memory import site_label
from gputui.collectors.hook_client import (
    Disconnected,
    HookClient,
    HookError,
    MemorySnapshotResult,
    MemorySnapshotStatus,
)
from gputui.commands.attach_report import JobFailed, print_json
from gputui.errors import GputuiError
from gputui.protocol import memsnap as ms
from gputui.protocol.memsnap import AllocSite

MEMORY_VIZ = "https://pytorch.org/memory_viz"


def snapshot_live(
    client: HookClient, steps: int, max_entries: int, timeout: float, quiet: bool
) -> MemorySnapshotResult:
    """Ask for a memory snapshot and wait for its result.  A job that cannot take
    one (no CUDA, an old torch) is a usage error (exit 2); a busy, refused or
    failed one, a job that exits or stops stepping, exit 1."""
    client.start()
    sid = client.request_memory_snapshot(steps, max_entries)
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        event = client.get(timeout=remaining) if remaining > 0 else None
        if event is None:
            raise JobFailed(
                f"gputui attach: the memory snapshot did not finish within {timeout:g} s "
                "(is the job still stepping?)"
            )
        if isinstance(event, Disconnected):
            raise JobFailed(
                f"gputui attach: job {client.pid} exited before the memory snapshot finished "
                f"({fmt.clean(event.reason)})"
            )
        if isinstance(event, HookError):
            if "unknown request type" in event.error:
                raise JobFailed(
                    f"gputui attach: the gputui hook in job {client.pid} does not take memory "
                    "snapshots (an older version): restart the job with this gputui"
                )
            raise JobFailed(f"gputui attach: hook: {fmt.clean(event.error)}")
        if isinstance(event, MemorySnapshotStatus) and event.id == sid:
            if event.ended:
                reason = fmt.clean(event.reason or "no reason given")
                if event.state == ms.UNSUPPORTED:
                    raise GputuiError(f"gputui attach: {reason}")
                raise JobFailed(f"gputui attach: memory snapshot {event.state}: {reason}")
            if not quiet:
                where = "" if event.step is None else f" from step {event.step}"
                print(f"memory snapshot: {event.state}{where}", file=sys.stderr)
        if isinstance(event, MemorySnapshotResult) and event.id == sid:
            if event.error:
                raise JobFailed(f"gputui attach: memory snapshot failed: {fmt.clean(event.error)}")
            return event


def findings(result: MemorySnapshotResult) -> list[Finding]:
    """What the analyzer makes of the snapshot alone (its growing sites)."""
    return analyze(job_evidence((), cuda=True, memory_snapshot=result))


def main(client: HookClient, steps: int, max_entries: int, timeout: float, as_json: bool) -> int:
    result = snapshot_live(client, steps, max_entries, timeout, quiet=as_json)
    found = findings(result)
    if as_json:
        print_json(json_doc(client.pid, result, found))
    else:
        print_result(result, found)
    return 0


def json_doc(pid: int | None, result: MemorySnapshotResult, found: list[Finding]) -> dict[str, Any]:
    """The ``--json`` document (docs/json.md: "attach --memory-snapshot --json")."""
    snap = result.to_wire()
    snap.pop("v", None)
    snap.pop("type", None)
    return {"pid": pid, "memory_snapshot": snap, "findings": [f.to_json() for f in found]}


# -- the text report -------------------------------------------------------------------------
NO_FRAME = "(no Python frame: backward or C++)"


def _site(site: AllocSite | None, width: int = 60) -> Any:
    from rich.text import Text

    label = NO_FRAME if site is None else fmt.clean(site_label(site))
    return Text(fmt.middle(label, width), no_wrap=True, overflow="ellipsis")


def _series(values: tuple[int, ...]) -> str:
    if not values:
        return "-"
    return f"{fmt.size(values[0])} \u2192 {fmt.size(values[-1])}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:g} ms"


def print_result(result: MemorySnapshotResult, found: list[Finding]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # Lines are not wrapped: paths and sites stay whole for copying.
    console = Console(highlight=False, soft_wrap=True)
    window = f"steps {result.first_step}..{result.last_step} ({result.steps} steps)"
    head = Text()
    head.append(f"memory snapshot of job {result.pid}, device {result.device}", style="bold")
    head.append(f": {window}, {result.alloc_count:,} allocations, ")
    head.append(f"{result.trace_entries:,} allocator events")
    if result.truncated:
        head.append(" (ring full: the oldest were overwritten)", style="yellow")
    console.print(head)
    console.print(
        Text(
            f"cost to the job: history on {_ms(result.start_ms)}, snapshot and off "
            f"{_ms(result.stop_ms)} at the last step boundary; summary {_ms(result.summary_ms)}"
            f" and file {_ms(result.dump_ms)} on a worker thread",
            style="dim",
        )
    )
    frag = result.fragmentation
    if frag is not None:
        unused = frag.unused_share
        console.print(
            Text(
                f"segments: {frag.segments} ({frag.large_segments} large, {frag.small_segments} "
                f"small), reserved {fmt.size(frag.reserved_bytes)}, allocated "
                f"{fmt.size(frag.allocated_bytes)}"
                + ("" if unused is None else f" ({unused * 100:.0f}% of reserved unused)")
                + f"; {frag.inactive_split_blocks} free blocks in split segments "
                f"({fmt.size(frag.inactive_split_bytes)}), largest free block "
                f"{fmt.size(frag.largest_inactive_bytes)}; "
                f"{fmt.size(frag.before_window_bytes)} allocated before the window"
            )
        )
    if not result.growth_checked:
        console.print(
            Text(
                f"growing allocations: not judged ({result.boundaries} step boundaries found; "
                f"{ms.MIN_GROWTH_BOUNDARIES + 1} needed, so snapshot at least "
                f"{ms.MIN_GROWTH_BOUNDARIES} steps)",
                style="yellow",
            )
        )
    elif not result.growing:
        console.print(Text("growing allocations: none (no site grew across the steps)", "green"))
    else:
        table = Table(
            title="growing allocations: alive at every step boundary and growing (leak candidates)",
            title_justify="left",
            box=None,
            header_style="bold",
        )
        for col in ("site", "per step", "alive at the boundaries", "kept"):
            table.add_column(col, justify="left" if col == "site" else "right")
        for g in result.growing:
            kept = g.live_count[-1] if g.live_count else 0
            table.add_row(
                _site(g.site), f"+{fmt.size(g.per_step_bytes)}", _series(g.live_bytes), str(kept)
            )
        console.print(table)
        top = result.growing[0].site
        if top is not None:
            for frame in top.frames:
                where = f"{fmt.clean(frame.file)}:{frame.line}"
                console.print(Text(f"    at {where} in {fmt.clean(frame.function)}"))
    if result.sites:
        table = Table(
            title=f"top allocation sites during the window ({result.site_count} sites)",
            title_justify="left",
            box=None,
            header_style="bold",
        )
        for col in ("site", "allocated", "count", "alive at the end"):
            table.add_column(col, justify="left" if col == "site" else "right")
        for s in result.sites[:10]:
            table.add_row(
                _site(s.site),
                fmt.size(s.bytes),
                f"{s.count:,}",
                f"{fmt.size(s.live_bytes)} ({s.live_count:,})" if s.live_count else "-",
            )
        console.print(table)
    if result.largest_blocks:
        table = Table(
            title="largest live blocks", title_justify="left", box=None, header_style="bold"
        )
        for col in ("size", "requested", "pool", "site"):
            table.add_column(col, justify="left" if col == "site" else "right")
        for b in result.largest_blocks:
            known = b.in_window or b.site is not None
            table.add_row(
                fmt.size(b.bytes),
                fmt.size(b.requested_bytes),
                fmt.clean(b.segment_type, 8),
                _site(b.site) if known else Text("allocated before the window", style="dim"),
            )
        console.print(table)
    for f in found:
        line = Text()
        line.append(f"{f.severity.upper()} ", style="bold red" if f.severity == "crit" else "bold")
        line.append(fmt.clean(f.title, 200), style="bold")
        line.append(f"\n  {fmt.clean(f.evidence)}\n  fix: {fmt.clean(f.fix)}")
        console.print(line)
    for note in result.notes:
        console.print(Text(f"note: {fmt.clean(note)}", style="yellow"))
    if result.snapshot_path:
        line = Text("snapshot file: ")
        line.append(fmt.clean(result.snapshot_path))
        size = "" if result.snapshot_bytes is None else f" ({fmt.size(result.snapshot_bytes)})"
        line.append(f"{size}; open it at {MEMORY_VIZ}")
        console.print(line)
    elif result.snapshot_error:
        console.print(
            Text(f"snapshot file not written: {fmt.clean(result.snapshot_error)}", "yellow")
        )
