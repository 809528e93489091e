"""``attach --memory-snapshot``: the memory snapshot's report, as text and as
JSON (docs/json.md)."""

from __future__ import annotations

from typing import Any

from gputui import fmt
from gputui.analysis.finding import Finding
from gputui.analysis.rules.memory import site_label
from gputui.collectors.hook_client import (
    MemorySnapshotResult,
)
from gputui.protocol import memsnap as ms
from gputui.protocol.memsnap import AllocSite

#: where a snapshot file opens (PyTorch's memory visualizer, in a browser)
MEMORY_VIZ = "https://pytorch.org/memory_viz"
#: an allocation site without a Python frame
NO_FRAME = "(no Python frame: backward or C++)"


def json_doc(pid: int | None, result: MemorySnapshotResult, found: list[Finding]) -> dict[str, Any]:
    """The ``--json`` document (docs/json.md: "attach --memory-snapshot --json")."""
    snap = result.to_wire()
    snap.pop("v", None)
    snap.pop("type", None)
    return {"pid": pid, "memory_snapshot": snap, "findings": [f.to_json() for f in found]}


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
