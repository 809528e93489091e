"""A memory snapshot as sentences and rows: what the memory screen (key m) and
``attach --memory-snapshot`` show of one :class:`MemorySnapshotResult`, worded
once for both.

Values only: every string from the job (file and function names, paths, errors,
notes) is cleaned here; numbers that a face draws (a bar, a sparkline) stay
numbers.  Each face lays the values out: the screen with bars, sparklines and
colours in its width, the printed report as wrapped lines and tables
(:mod:`gputui.reports.memory`).
"""

from __future__ import annotations

from dataclasses import dataclass

from gputui import fmt
from gputui.analysis.rules.memory import site_label
from gputui.protocol import memsnap as ms
from gputui.protocol.memsnap import AllocSite, MemorySnapshotResult
from gputui.reports.text import plural

#: where a snapshot file opens (PyTorch's memory visualizer, in a browser)
MEMORY_VIZ = "https://pytorch.org/memory_viz"
OPEN_AT = f"open it at {MEMORY_VIZ}"
#: an allocation site without a Python frame
NO_FRAME = "(no Python frame: backward or C++)"
#: a live block allocated before the history was on (its site is unknown)
BEFORE_WINDOW = "allocated before the window"
REPLAYED = "taken before this viewer attached"
RING_FULL = "ring full: the oldest events were overwritten"

#: the sections, as headed
ALLOCATOR = "Allocator"
GROWING = "Growing allocations"
GROWING_NOTE = "alive at every step boundary, and growing"
TOP_SITES = "Top allocation sites"
LARGEST = "Largest live blocks"
#: the tables' columns
GROWING_COLUMNS = ("site", "per step", "at boundaries", "kept")
SITE_COLUMNS = ("site", "allocated", "count", "alive at end")
BLOCK_COLUMNS = ("size", "requested", "pool", "site")
#: allocation sites listed
TOP_SITE_ROWS = 10


@dataclass(frozen=True)
class AllocatorView:
    """The allocator's segments: how much of what it reserved tensors use."""

    note: str  # "726 segments"
    used_share: float | None  # allocated over reserved, 0..1
    used: str  # "1.7GiB allocated of 1.8GiB"
    #: the free blocks in split segments, what was allocated before the window
    lines: tuple[str, ...]


@dataclass(frozen=True)
class GrowingRow:
    """A site whose allocations alive at every step boundary grew."""

    site: str
    per_step: str  # "+4.0MiB"
    live_bytes: tuple[int, ...]  # alive at each boundary, oldest first
    kept: int  # allocations alive at the last boundary


@dataclass(frozen=True)
class SiteRow:
    site: str
    allocated: str
    count: int
    alive: str  # "4.0MiB (3)" alive at the window's end, or "-"


@dataclass(frozen=True)
class BlockRow:
    size: str
    requested: str
    pool: str
    site: str | None  # None: allocated before the window (BEFORE_WINDOW)


@dataclass(frozen=True)
class FrameRow:
    where: str  # "file.py:12"
    function: str


@dataclass(frozen=True)
class MemorySnapshotView:
    """One memory snapshot, said once for every face."""

    window: str  # "steps 100..104 (5 steps) on device 0"
    counts: str  # "408 allocations, 1,237 allocator events"
    replayed: bool  # sent again to a viewer that attached after it
    truncated: bool  # the allocator's ring was full (RING_FULL)
    cost: str  # what it cost the job
    error: str | None  # "failed: ..."
    allocator: AllocatorView | None
    #: the growing allocations: judged at all, the verdict when none grew (or
    #: none could be judged), else the rows and the top site's stack
    growth_checked: bool
    growing_verdict: str | None
    growing: tuple[GrowingRow, ...]
    top_frames: tuple[FrameRow, ...]
    sites_note: str  # "during the window, 6 sites"
    sites: tuple[SiteRow, ...]
    blocks: tuple[BlockRow, ...]
    notes: tuple[str, ...]  # "note: ..."
    #: the snapshot file's path, else why there is none
    file: str
    file_written: bool


def site_text(site: AllocSite | None) -> str:
    return NO_FRAME if site is None else fmt.clean(site_label(site))


def memsnap_view(r: MemorySnapshotResult) -> MemorySnapshotView:
    """The sentences and rows of ``r``."""
    steps = "?" if r.steps is None else plural(r.steps, "step")
    stop, summary, dump = (
        fmt.ms(None if v is None else v / 1000, decimals=1, space=True)
        for v in (r.stop_ms, r.summary_ms, r.dump_ms)
    )
    if r.growth_checked:
        verdict = None if r.growing else "none: no allocation site grew across the steps"
    else:
        found = plural(r.boundaries, "step boundary", "step boundaries")
        verdict = f"not judged: {found} found, {ms.MIN_GROWTH_BOUNDARIES + 1} needed"
    top = r.growing[0].site if r.growing and r.growth_checked else None
    return MemorySnapshotView(
        window=f"steps {r.first_step}..{r.last_step} ({steps}) on device {r.device}",
        counts=f"{plural(r.alloc_count, 'allocation')}, "
        f"{plural(r.trace_entries, 'allocator event')}",
        replayed=r.replay,
        truncated=r.truncated,
        cost=f"cost: {stop} at the last step boundary; summary {summary} "
        f"and file {dump} off the training thread",
        error=None if not r.error else f"failed: {fmt.clean(r.error)}",
        allocator=_allocator(r),
        growth_checked=r.growth_checked,
        growing_verdict=verdict,
        growing=()
        if verdict is not None
        else tuple(
            GrowingRow(
                site=site_text(g.site),
                per_step=f"+{fmt.size(g.per_step_bytes)}",
                live_bytes=g.live_bytes,
                kept=g.live_count[-1] if g.live_count else 0,
            )
            for g in r.growing
        ),
        top_frames=()
        if top is None
        else tuple(
            FrameRow(fmt.clean(f"{f.file}:{f.line}"), fmt.clean(f.function)) for f in top.frames
        ),
        sites_note=f"during the window, {plural(r.site_count, 'site')}",
        sites=tuple(
            SiteRow(
                site=site_text(s.site),
                allocated=fmt.size(s.bytes),
                count=s.count,
                alive=f"{fmt.size(s.live_bytes)} ({s.live_count:,})" if s.live_count else "-",
            )
            for s in r.sites[:TOP_SITE_ROWS]
        ),
        blocks=tuple(
            BlockRow(
                size=fmt.size(b.bytes),
                requested=fmt.size(b.requested_bytes),
                pool=fmt.clean(b.segment_type),
                site=site_text(b.site) if b.in_window or b.site is not None else None,
            )
            for b in r.largest_blocks
        ),
        notes=tuple(f"note: {fmt.clean(note)}" for note in r.notes),
        file=fmt.clean(r.snapshot_path or r.snapshot_error or "not written"),
        file_written=bool(r.snapshot_path),
    )


def _allocator(r: MemorySnapshotResult) -> AllocatorView | None:
    frag = r.fragmentation
    if frag is None:
        return None
    return AllocatorView(
        note=plural(frag.segments, "segment"),
        used_share=frag.allocated_bytes / frag.reserved_bytes if frag.reserved_bytes else None,
        used=f"{fmt.size(frag.allocated_bytes)} allocated of {fmt.size(frag.reserved_bytes)}",
        lines=(
            f"free blocks in split segments: {frag.inactive_split_blocks:,} "
            f"({fmt.size(frag.inactive_split_bytes)}), largest free block "
            f"{fmt.size(frag.largest_inactive_bytes)}",
            f"allocated before the window: {fmt.size(frag.before_window_bytes)}",
        ),
    )
