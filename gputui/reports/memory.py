"""``attach --memory-snapshot``: the memory snapshot's report, as text and as
JSON (docs/json.md)."""

from __future__ import annotations

from typing import Any

from gputui import fmt
from gputui.analysis.finding import Finding
from gputui.analysis.rules.memory import site_label
from gputui.protocol import memsnap as ms
from gputui.protocol.memsnap import AllocSite, MemorySnapshotResult
from gputui.reports import findings as findings_text
from gputui.reports.text import emit, output_width, plural, table, wrap

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


def _site(site: AllocSite | None) -> str:
    return NO_FRAME if site is None else fmt.clean(site_label(site))


def _series(values: tuple[int, ...]) -> str:
    if not values:
        return "-"
    return f"{fmt.size(values[0])} \u2192 {fmt.size(values[-1])}"


#: the indent of tables and of a long line's continuation
_TAB = "  "


def print_result(
    result: MemorySnapshotResult, found: list[Finding], ascii_only: bool = False
) -> None:
    """The report on standard output, to its width (``--ascii``: ASCII only)."""
    emit(render(result, found), ascii_only)


def render(
    result: MemorySnapshotResult, found: list[Finding], width: int | None = None
) -> list[str]:
    """The report as lines of at most ``width`` characters (the output's width by
    default): sentences and paths whole, allocation sites elided in the middle in
    the tables (each site's full frames are listed under the growing ones)."""
    width = output_width() if width is None else width
    steps = "?" if result.steps is None else plural(result.steps, "step")
    window = f"steps {result.first_step}..{result.last_step} ({steps})"
    head = (
        f"memory snapshot of job {result.pid}, device {result.device}: {window}, "
        f"{plural(result.alloc_count, 'allocation')}, "
        f"{plural(result.trace_entries, 'allocator event')}"
    )
    if result.truncated:
        head += " (ring full: the oldest were overwritten)"
    out = wrap(head, width, "", _TAB)
    start, stop, summary, dump = (
        fmt.ms(None if v is None else v / 1000, decimals=1, space=True)
        for v in (result.start_ms, result.stop_ms, result.summary_ms, result.dump_ms)
    )
    out += wrap(
        f"cost to the job: history on {start}, snapshot and off {stop} at the last step "
        f"boundary; summary {summary} and file {dump} on a worker thread",
        width,
        "",
        _TAB,
    )
    frag = result.fragmentation
    if frag is not None:
        unused = frag.unused_share
        out += wrap(
            f"segments: {frag.segments} ({frag.large_segments} large, {frag.small_segments} "
            f"small), reserved {fmt.size(frag.reserved_bytes)}, allocated "
            f"{fmt.size(frag.allocated_bytes)}"
            + ("" if unused is None else f" ({unused * 100:.0f}% of reserved unused)")
            + f"; {plural(frag.inactive_split_blocks, 'free block')} in split segments "
            f"({fmt.size(frag.inactive_split_bytes)}), largest free block "
            f"{fmt.size(frag.largest_inactive_bytes)}; "
            f"{fmt.size(frag.before_window_bytes)} allocated before the window",
            width,
            "",
            _TAB,
        )
    out += _growing(result, width)
    if result.sites:
        rows = [
            [
                _site(s.site),
                fmt.size(s.bytes),
                f"{s.count:,}",
                f"{fmt.size(s.live_bytes)} ({s.live_count:,})" if s.live_count else "-",
            ]
            for s in result.sites[:10]
        ]
        out += wrap(
            f"top allocation sites during the window ({plural(result.site_count, 'site')})", width
        )
        out += _indented_table(
            ["site", "allocated", "count", "alive at the end"],
            rows,
            width,
            [False, True, True, True],
            0,
        )
    if result.largest_blocks:
        rows = []
        for b in result.largest_blocks:
            known = b.in_window or b.site is not None
            rows.append(
                [
                    fmt.size(b.bytes),
                    fmt.size(b.requested_bytes),
                    fmt.clean(b.segment_type, 8),
                    _site(b.site) if known else "allocated before the window",
                ]
            )
        out.append("largest live blocks")
        out += _indented_table(
            ["size", "requested", "pool", "site"], rows, width, [True, True, True, False], 3
        )
    if found:
        out += findings_text.text_blocks(found, width, with_rule=False)
    for note in result.notes:
        out += wrap(f"note: {fmt.clean(note)}", width, "", _TAB)
    if result.snapshot_path:
        size = "" if result.snapshot_bytes is None else f" ({fmt.size(result.snapshot_bytes)})"
        out += wrap(
            f"snapshot file: {fmt.clean(result.snapshot_path)}{size}; open it at {MEMORY_VIZ}",
            width,
            "",
            _TAB,
        )
    elif result.snapshot_error:
        out += wrap(f"snapshot file not written: {fmt.clean(result.snapshot_error)}", width)
    return out


def _indented_table(
    headers: list[str], rows: list[list[str]], width: int, right: list[bool], flexible: int
) -> list[str]:
    """A table one tab in from the text above it."""
    lines = table(headers, rows, width - len(_TAB), right=right, flexible=flexible)
    return [_TAB + line for line in lines]


def _growing(result: MemorySnapshotResult, width: int) -> list[str]:
    if not result.growth_checked:
        found = plural(result.boundaries, "step boundary", "step boundaries")
        return wrap(
            f"growing allocations: not judged ({found} found; "
            f"{ms.MIN_GROWTH_BOUNDARIES + 1} needed, so snapshot at least "
            f"{ms.MIN_GROWTH_BOUNDARIES} steps)",
            width,
            "",
            _TAB,
        )
    if not result.growing:
        return wrap("growing allocations: none (no site grew across the steps)", width)
    rows = [
        [
            _site(g.site),
            f"+{fmt.size(g.per_step_bytes)}",
            _series(g.live_bytes),
            str(g.live_count[-1] if g.live_count else 0),
        ]
        for g in result.growing
    ]
    out = wrap(
        "growing allocations: alive at every step boundary and growing (leak candidates)", width
    )
    out += _indented_table(
        ["site", "per step", "alive at the boundaries", "kept"],
        rows,
        width,
        [False, True, True, True],
        0,
    )
    top = result.growing[0].site
    if top is not None:
        for frame in top.frames:
            where = f"{fmt.clean(frame.file)}:{frame.line}"
            out += wrap(f"at {where} in {fmt.clean(frame.function)}", width, _TAB * 2, _TAB * 3)
    return out
