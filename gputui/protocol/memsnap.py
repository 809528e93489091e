"""Typed memory-snapshot messages: the viewer's request, its progress, and the
result with the summary the hook computes in the job (standard library only).

A memory snapshot records the CUDA caching allocator's history (every alloc and
free with its Python stack) for N steps, from one step boundary to another, then
saves torch's snapshot file (pytorch.org/memory_viz opens it) and sends this
summary: the top allocation sites, the largest live blocks, fragmentation, and
the sites whose live bytes grew at every step boundary (leak candidates).  Every
list and string in it is bounded, so a result always fits in one frame.

See :mod:`gputui.protocol.schema` for the conventions.
"""

from __future__ import annotations

from typing import Any, ClassVar

from gputui.protocol import fields as f
from gputui.protocol import messages as m
from gputui.protocol import spec
from gputui.protocol.fields import MAX_PID, MAX_TIME_S, SchemaError
from gputui.protocol.progress import Progress
from gputui.protocol.value import value_class

# -- limits (the hook refuses other requests; viewers check them first) ---------------------------
DEFAULT_STEPS = 5
MAX_STEPS = 100
#: allocator trace entries kept (torch's ring buffer: the oldest are overwritten)
DEFAULT_ENTRIES = 100_000
MIN_ENTRIES = 1_000
MAX_ENTRIES = 1_000_000
#: fewer step boundaries than this inside the window: no verdict on growth
MIN_GROWTH_BOUNDARIES = 3

# -- bounds of the summary --------------------------------------------------------------------
MAX_FRAMES = 8  # stack frames kept per site, from the site outwards
MAX_FILENAME = 512  # characters (the end of a longer path is kept)
MAX_FUNCTION = 256
MAX_SITES = 20
MAX_BLOCKS = 10
MAX_GROWING = 10
_BIG = 1e15  # milliseconds: a bound no real snapshot reaches

# -- states (MEMSNAP_STATUS "state") --------------------------------------------------------
ARMED = "armed"  # accepted; history starts at the next step boundary
RECORDING = "recording"  # allocation history on
PROCESSING = "processing"  # history off; summarising and writing the file off the training thread
#: this job cannot take one: no CUDA in use, or a torch without the history API
UNSUPPORTED = "unsupported"
#: the hook will not: disabled, or the job records allocation history itself
REFUSED = "refused"
BUSY = "busy"  # another memory snapshot or a profiler capture is under way
FAILED = "failed"  # bad request, or torch raised
ACTIVE = frozenset({ARMED, RECORDING, PROCESSING})
ENDED = frozenset({UNSUPPORTED, REFUSED, BUSY, FAILED})
STATES = ACTIVE | ENDED


@spec.message(m.MEMSNAP)
@value_class
class MemorySnapshotRequest(spec.Wire):
    id: str | None = spec.ident()
    steps: int = spec.integer(DEFAULT_STEPS, 1, MAX_STEPS)
    max_entries: int = spec.integer(DEFAULT_ENTRIES, MIN_ENTRIES, MAX_ENTRIES)


@spec.message(m.MEMSNAP_STATUS)
@value_class
class MemorySnapshotStatus(Progress):
    """Progress of one memory snapshot: a state of :data:`STATES`."""

    ACTIVE: ClassVar[frozenset[str]] = ACTIVE


# -- the summary --------------------------------------------------------------------------------
@spec.value("frame")
@value_class
class Frame(spec.Wire):
    """One Python frame of an allocation's stack (as the job saw it: untrusted)."""

    file: str = spec.text(limit=MAX_FILENAME)
    line: int = spec.integer(hi=1 << 31, missing=0)
    function: str = spec.text(limit=MAX_FUNCTION, missing="")


@spec.value("site")
@value_class
class AllocSite(spec.Wire):
    """Where allocations come from: the first frame of their stack outside torch,
    the standard library and gputui (the user's line that allocated, or called
    into torch), with up to :data:`MAX_FRAMES` frames from it outwards."""

    file: str = spec.text(limit=MAX_FILENAME)
    line: int = spec.integer(hi=1 << 31, missing=0)
    function: str = spec.text(limit=MAX_FUNCTION, missing="")
    frames: tuple[Frame, ...] = spec.rows(Frame, MAX_FRAMES)

    @property
    def label(self) -> str:
        """``file:line function`` (the full path: display code shortens it)."""
        return f"{self.file}:{self.line} {self.function}".rstrip()


def _counts(obj: Any, key: str, where: str) -> tuple[int, ...]:
    """A list of byte counts (or counts), one per step boundary."""
    out = []
    for i, value in enumerate(f.items(obj, key, where, MAX_STEPS + 1)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= f.MAX_COUNT:
            raise SchemaError(f"{where}.{key}[{i}]", f"expected a count, got {str(value)[:40]!r}")
        out.append(value)
    return tuple(out)


@spec.value("site_stats")
@value_class
class SiteStats(spec.Wire):
    """What one site allocated during the window, and what of it was still alive
    at the window's end.  ``site`` None: allocations with no Python frame (made
    by autograd's backward threads or C++ code)."""

    site: AllocSite | None = spec.nested(AllocSite, required=True)
    bytes: int = spec.integer()  # allocated during the window (sizes as requested)
    count: int = spec.integer()
    live_bytes: int = 0  # of those, alive at the window's end
    live_count: int = 0


@spec.value("block")
@value_class
class LiveBlock(spec.Wire):
    """One allocated block at the window's end.  ``in_window``: allocated while
    the history was on (its site is known unless it had no Python frame)."""

    bytes: int  # the block's size (rounded by the allocator)
    requested_bytes: int = spec.integer(missing=0)
    stream: int = spec.integer(0, lo=-(1 << 63))
    segment_type: str = spec.text("", 32)  # "large" or "small" pool
    in_window: bool = False
    site: AllocSite | None = spec.nested(AllocSite)


@spec.value("fragmentation")
@value_class
class Fragmentation(spec.Wire):
    """The allocator's segments on the device at the window's end.

    ``reserved`` is what cudaMalloc handed out, ``allocated`` what tensors use.
    Inactive blocks are cached and free; those in a segment that is split (it
    also holds allocated blocks) can only serve requests that fit them, which is
    what fragmentation is.  ``before_window_bytes``: allocated bytes whose
    allocation predates the window (parameters, optimizer state, ...)."""

    segments: int
    reserved_bytes: int
    allocated_bytes: int
    active_bytes: int = 0
    requested_bytes: int = 0
    large_segments: int = 0
    small_segments: int = 0
    expandable_segments: int = 0
    inactive_blocks: int = 0
    inactive_bytes: int = 0
    inactive_split_blocks: int = 0
    inactive_split_bytes: int = 0
    largest_inactive_bytes: int = 0
    pending_free_bytes: int = 0
    before_window_bytes: int = 0

    @property
    def unused_share(self) -> float | None:
        """Reserved but not allocated, as a share of reserved."""
        if self.reserved_bytes <= 0:
            return None
        return max(0.0, 1.0 - self.allocated_bytes / self.reserved_bytes)


@spec.value("growing")
@value_class
class GrowingSite(spec.Wire):
    """A site whose allocations from the window were alive in growing amounts at
    the step boundaries: ``live_bytes[k]`` at the k-th boundary after the first
    step (never falling, rising at most of them)."""

    site: AllocSite | None = spec.nested(AllocSite, required=True)
    live_bytes: tuple[int, ...] = spec.field(_counts, write="list({v})")
    live_count: tuple[int, ...] = spec.field(_counts, default=(), write="list({v})")
    growth_bytes: int = 0  # last minus first
    per_step_bytes: float = spec.number(0.0, hi=f.MAX_COUNT)


@spec.message(m.MEMSNAP_RESULT)
@value_class
class MemorySnapshotResult(spec.Wire):
    """A finished memory snapshot: its window, what it cost, the summary and
    torch's snapshot file (a pickle: gputui writes it for memory_viz and never
    reads it back)."""

    id: str | None = spec.ident()
    pid: int | None = spec.integer(None, 1, MAX_PID)
    device: int | None = spec.integer(None, hi=1 << 16)
    first_step: int | None = None  # the first step recorded
    last_step: int | None = spec.integer(None, lo=-1)
    steps: int | None = None
    started: float | None = spec.number(None, hi=MAX_TIME_S)  # Unix seconds the history started
    window_end_wall: float | None = spec.number(None, hi=MAX_TIME_S)
    max_entries: int | None = None
    trace_entries: int = 0  # allocator events in the device's trace
    #: the trace ring buffer was full: its oldest events were overwritten
    truncated: bool = False
    #: step boundaries found in the trace (steps + 1 when complete)
    boundaries: int = 0
    #: enough boundaries were seen for a verdict on growing sites
    growth_checked: bool = False
    # what it cost, in milliseconds
    start_ms: float | None = spec.number(None, hi=_BIG)  # turning the history on (training thread)
    #: the snapshot and turning it off (training thread)
    stop_ms: float | None = spec.number(None, hi=_BIG)
    summary_ms: float | None = spec.number(None, hi=_BIG)  # the summary (worker thread)
    dump_ms: float | None = spec.number(None, hi=_BIG)  # writing the file (worker thread)
    #: from the window's end to this result
    ready_after_ms: float | None = spec.number(None, hi=_BIG)
    alloc_count: int = 0  # allocations during the window
    alloc_bytes: int = 0
    site_count: int = 0  # distinct sites (``sites`` holds the top ones)
    sites: tuple[SiteStats, ...] = spec.rows(SiteStats, MAX_SITES)
    largest_blocks: tuple[LiveBlock, ...] = spec.rows(LiveBlock, MAX_BLOCKS)
    fragmentation: Fragmentation | None = spec.nested(Fragmentation)
    growing: tuple[GrowingSite, ...] = spec.rows(GrowingSite, MAX_GROWING)
    snapshot_path: str | None = None
    snapshot_bytes: int | None = None
    snapshot_error: str | None = None
    error: str | None = None
    #: sent again to a viewer that connected after the snapshot finished
    replay: bool = spec.flag(omit_empty=True)
    notes: tuple[str, ...] = spec.texts(16, 1024)
