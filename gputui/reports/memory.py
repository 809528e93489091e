"""``attach --memory-snapshot``: the memory snapshot's report, as text and as
JSON (docs/json.md).  The text says what the memory screen says, from the same
sentences and rows (:mod:`gputui.reports.memsnap_view`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gputui import fmt
from gputui.analysis.finding import Finding
from gputui.protocol.memsnap import MemorySnapshotResult
from gputui.reports import findings as findings_text
from gputui.reports import memsnap_view as mv
from gputui.reports.jsondoc import print_json
from gputui.reports.text import emit, indented_table, output_width, wrap
from gputui.session.oneshot import MemsnapReport


def output(report: MemsnapReport, as_json: bool, ascii_only: bool = False) -> None:
    """The report on standard output: its JSON, or its text to the output's width
    (``--ascii``: ASCII only)."""
    if as_json:
        print_json(json_doc(report.pid, report.result, report.findings))
    else:
        print_result(report.result, report.findings, ascii_only)


def json_doc(
    pid: int | None, result: MemorySnapshotResult, found: Sequence[Finding]
) -> dict[str, Any]:
    """The ``--json`` document (docs/json.md: "attach --memory-snapshot --json")."""
    snap = result.to_wire()
    snap.pop("v", None)
    snap.pop("type", None)
    return {"pid": pid, "memory_snapshot": snap, "findings": [f.to_json() for f in found]}


#: the indent of tables and of a long line's continuation
_TAB = "  "


def print_result(
    result: MemorySnapshotResult, found: Sequence[Finding], ascii_only: bool = False
) -> None:
    """The report on standard output, to its width (``--ascii``: ASCII only)."""
    emit(render(result, found), ascii_only)


def render(
    result: MemorySnapshotResult, found: Sequence[Finding], width: int | None = None
) -> list[str]:
    """The report as lines of at most ``width`` characters (the output's width by
    default): sentences and paths whole, allocation sites elided in the middle in
    the tables (each site's full frames are listed under the growing ones)."""
    width = output_width() if width is None else width
    v = mv.memsnap_view(result)
    head = f"memory snapshot of job {result.pid}: {v.window}, {v.counts}"
    if v.replayed:
        head += f" ({mv.REPLAYED})"
    out = wrap(head, width, "", _TAB)
    for said in (mv.RING_FULL if v.truncated else None, v.cost, v.error):
        if said:
            out += wrap(said, width, "", _TAB)
    alloc = v.allocator
    if alloc is not None:
        used = fmt.pct(None if alloc.used_share is None else alloc.used_share * 100)
        out += _section(
            mv.ALLOCATOR, alloc.note, [f"reserved {used}: {alloc.used}", *alloc.lines], width
        )
    out += _growing(v, width)
    if v.sites:
        rows = [[s.site, s.allocated, f"{s.count:,}", s.alive] for s in v.sites]
        out += _section(mv.TOP_SITES, v.sites_note, [], width)
        out += indented_table(
            mv.SITE_COLUMNS, rows, width, right=[False, True, True, True], flexible=0
        )
    if v.blocks:
        rows = [
            [b.size, b.requested, fmt.truncate(b.pool, 8), b.site or mv.BEFORE_WINDOW]
            for b in v.blocks
        ]
        out += _section(mv.LARGEST, "", [], width)
        out += indented_table(
            mv.BLOCK_COLUMNS, rows, width, right=[True, True, True, False], flexible=3
        )
    if found:
        out += findings_text.text_blocks(found, width, with_rule=False)
    for note in v.notes:
        out += wrap(note, width, "", _TAB)
    out += wrap(f"file: {v.file}", width, "", _TAB)
    if v.file_written:
        out += wrap(mv.OPEN_AT, width, _TAB, _TAB)
    return out


def _section(title: str, note: str, lines: list[str], width: int) -> list[str]:
    """A section as the memory screen heads it, in the report's lower case, and
    its lines one tab in."""
    head = title[:1].lower() + title[1:] + (f" ({note})" if note else "")
    out = wrap(head, width, "", _TAB)
    for line in lines:
        out += wrap(line, width, _TAB, _TAB * 2)
    return out


def _growing(v: mv.MemorySnapshotView, width: int) -> list[str]:
    if v.growing_verdict is not None:
        return _section(mv.GROWING, "", [v.growing_verdict], width)
    rows = [[g.site, g.per_step, _series(g.live_bytes), str(g.kept)] for g in v.growing]
    out = _section(mv.GROWING, mv.GROWING_NOTE, [], width)
    out += indented_table(
        mv.GROWING_COLUMNS, rows, width, right=[False, True, True, True], flexible=0
    )
    for frame in v.top_frames:
        out += wrap(f"at {frame.where} in {frame.function}", width, _TAB * 2, _TAB * 3)
    return out


def _series(values: tuple[int, ...]) -> str:
    """The bytes alive at the first and at the last step boundary."""
    if not values:
        return "-"
    return f"{fmt.size(values[0])} \u2192 {fmt.size(values[-1])}"
