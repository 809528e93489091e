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

from dataclasses import dataclass, field
from typing import Any, ClassVar

from gputui.protocol import fields as f
from gputui.protocol import messages as m
from gputui.protocol.fields import MAX_PID, MAX_TIME_S, SchemaError, header, typed
from gputui.protocol.progress import Progress

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


@dataclass(frozen=True)
class MemorySnapshotRequest:
    id: str | None = None
    steps: int = DEFAULT_STEPS
    max_entries: int = DEFAULT_ENTRIES

    @classmethod
    def from_wire(cls, obj: Any, where: str = "memory_snapshot") -> MemorySnapshotRequest:
        obj = typed(obj, where)
        return cls(
            id=f.ident(obj, "id", where),
            steps=f.integer(obj, "steps", where, 1, MAX_STEPS, default=DEFAULT_STEPS),
            max_entries=f.integer(
                obj, "max_entries", where, MIN_ENTRIES, MAX_ENTRIES, default=DEFAULT_ENTRIES
            ),
        )

    def to_wire(self) -> dict[str, Any]:
        out = header(m.MEMSNAP)
        out.update(id=self.id, steps=self.steps, max_entries=self.max_entries)
        return out


@dataclass(frozen=True)
class MemorySnapshotStatus(Progress):
    """Progress of one memory snapshot: a state of :data:`STATES`."""

    TYPE: ClassVar[str] = m.MEMSNAP_STATUS
    ACTIVE: ClassVar[frozenset[str]] = ACTIVE

    @classmethod
    def from_wire(cls, obj: Any, where: str = "memory_snapshot_status") -> MemorySnapshotStatus:
        return cls(**cls._fields(obj, where))


# -- the summary --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Frame:
    """One Python frame of an allocation's stack (as the job saw it: untrusted)."""

    file: str
    line: int
    function: str

    @classmethod
    def from_wire(cls, obj: Any, where: str) -> Frame:
        obj = typed(obj, where)
        return cls(
            file=f.text(obj, "file", where, MAX_FILENAME),
            line=f.integer(obj, "line", where, 0, 1 << 31, default=0),
            function=f.text(obj, "function", where, MAX_FUNCTION, default=""),
        )

    def to_wire(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "function": self.function}


@dataclass(frozen=True)
class AllocSite:
    """Where allocations come from: the first frame of their stack outside torch,
    the standard library and gputui (the user's line that allocated, or called
    into torch), with up to :data:`MAX_FRAMES` frames from it outwards."""

    file: str
    line: int
    function: str
    frames: tuple[Frame, ...] = ()

    @property
    def label(self) -> str:
        """``file:line function`` (the full path: display code shortens it)."""
        return f"{self.file}:{self.line} {self.function}".rstrip()

    @classmethod
    def from_wire(cls, obj: Any, where: str) -> AllocSite:
        obj = typed(obj, where)
        return cls(
            file=f.text(obj, "file", where, MAX_FILENAME),
            line=f.integer(obj, "line", where, 0, 1 << 31, default=0),
            function=f.text(obj, "function", where, MAX_FUNCTION, default=""),
            frames=tuple(
                Frame.from_wire(x, f"{where}.frames[{i}]")
                for i, x in enumerate(f.items(obj, "frames", where, MAX_FRAMES))
            ),
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "function": self.function,
            "frames": [x.to_wire() for x in self.frames],
        }


def _counts(obj: Any, key: str, where: str) -> tuple[int, ...]:
    """A list of byte counts (or counts), one per step boundary."""
    out = []
    for i, value in enumerate(f.items(obj, key, where, MAX_STEPS + 1)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= f.MAX_COUNT:
            raise SchemaError(f"{where}.{key}[{i}]", f"expected a count, got {str(value)[:40]!r}")
        out.append(value)
    return tuple(out)


def _site(obj: dict[str, Any], where: str) -> AllocSite | None:
    child = f.child(obj, "site", where)
    return None if child is None else AllocSite.from_wire(child, where + ".site")


@dataclass(frozen=True)
class SiteStats:
    """What one site allocated during the window, and what of it was still alive
    at the window's end.  ``site`` None: allocations with no Python frame (made
    by autograd's backward threads or C++ code)."""

    site: AllocSite | None
    bytes: int  # allocated during the window (sizes as requested)
    count: int
    live_bytes: int = 0  # of those, alive at the window's end
    live_count: int = 0

    @classmethod
    def from_wire(cls, obj: Any, where: str) -> SiteStats:
        obj = typed(obj, where)
        return cls(
            site=_site(dict(obj), where),
            bytes=f.integer(obj, "bytes", where),
            count=f.integer(obj, "count", where),
            live_bytes=f.integer(obj, "live_bytes", where, default=0),
            live_count=f.integer(obj, "live_count", where, default=0),
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "site": None if self.site is None else self.site.to_wire(),
            "bytes": self.bytes,
            "count": self.count,
            "live_bytes": self.live_bytes,
            "live_count": self.live_count,
        }


@dataclass(frozen=True)
class LiveBlock:
    """One allocated block at the window's end.  ``in_window``: allocated while
    the history was on (its site is known unless it had no Python frame)."""

    bytes: int  # the block's size (rounded by the allocator)
    requested_bytes: int
    stream: int = 0
    segment_type: str = ""  # "large" or "small" pool
    in_window: bool = False
    site: AllocSite | None = None

    @classmethod
    def from_wire(cls, obj: Any, where: str) -> LiveBlock:
        obj = typed(obj, where)
        return cls(
            bytes=f.integer(obj, "bytes", where),
            requested_bytes=f.integer(obj, "requested_bytes", where, default=0),
            stream=f.integer(obj, "stream", where, lo=-(1 << 63), default=0),
            segment_type=f.text(obj, "segment_type", where, 32, default=""),
            in_window=f.flag(obj, "in_window", where),
            site=_site(dict(obj), where),
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "bytes": self.bytes,
            "requested_bytes": self.requested_bytes,
            "stream": self.stream,
            "segment_type": self.segment_type,
            "in_window": self.in_window,
            "site": None if self.site is None else self.site.to_wire(),
        }


@dataclass(frozen=True)
class Fragmentation:
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

    _FIELDS = (
        "segments",
        "reserved_bytes",
        "allocated_bytes",
        "active_bytes",
        "requested_bytes",
        "large_segments",
        "small_segments",
        "expandable_segments",
        "inactive_blocks",
        "inactive_bytes",
        "inactive_split_blocks",
        "inactive_split_bytes",
        "largest_inactive_bytes",
        "pending_free_bytes",
        "before_window_bytes",
    )

    @classmethod
    def from_wire(cls, obj: Any, where: str = "fragmentation") -> Fragmentation:
        obj = typed(obj, where)
        required = ("segments", "reserved_bytes", "allocated_bytes")
        values = {
            name: f.integer(obj, name, where, default=f.MISSING if name in required else 0)
            for name in cls._FIELDS
        }
        return cls(**values)

    def to_wire(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._FIELDS}


@dataclass(frozen=True)
class GrowingSite:
    """A site whose allocations from the window were alive in growing amounts at
    the step boundaries: ``live_bytes[k]`` at the k-th boundary after the first
    step (never falling, rising at most of them)."""

    site: AllocSite | None
    live_bytes: tuple[int, ...]
    live_count: tuple[int, ...] = ()
    growth_bytes: int = 0  # last minus first
    per_step_bytes: float = 0.0

    @classmethod
    def from_wire(cls, obj: Any, where: str) -> GrowingSite:
        obj = typed(obj, where)
        return cls(
            site=_site(dict(obj), where),
            live_bytes=_counts(obj, "live_bytes", where),
            live_count=_counts(obj, "live_count", where),
            growth_bytes=f.integer(obj, "growth_bytes", where, default=0),
            per_step_bytes=f.number(obj, "per_step_bytes", where, hi=f.MAX_COUNT, default=0.0),
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "site": None if self.site is None else self.site.to_wire(),
            "live_bytes": list(self.live_bytes),
            "live_count": list(self.live_count),
            "growth_bytes": self.growth_bytes,
            "per_step_bytes": self.per_step_bytes,
        }


@dataclass(frozen=True)
class MemorySnapshotResult:
    """A finished memory snapshot: its window, what it cost, the summary and
    torch's snapshot file (a pickle: gputui writes it for memory_viz and never
    reads it back)."""

    id: str | None = None
    pid: int | None = None
    device: int | None = None
    first_step: int | None = None  # the first step recorded
    last_step: int | None = None
    steps: int | None = None
    started: float | None = None  # Unix seconds the history started
    window_end_wall: float | None = None
    max_entries: int | None = None
    trace_entries: int = 0  # allocator events in the device's trace
    #: the trace ring buffer was full: its oldest events were overwritten
    truncated: bool = False
    boundaries: int = 0  # step boundaries found in the trace (steps + 1 when complete)
    #: enough boundaries were seen for a verdict on growing sites
    growth_checked: bool = False
    # what it cost, in milliseconds
    start_ms: float | None = None  # turning the history on (training thread)
    stop_ms: float | None = None  # the snapshot and turning it off (training thread)
    summary_ms: float | None = None  # the summary (worker thread)
    dump_ms: float | None = None  # writing the file (worker thread)
    ready_after_ms: float | None = None  # from the window's end to this result
    alloc_count: int = 0  # allocations during the window
    alloc_bytes: int = 0
    site_count: int = 0  # distinct sites (``sites`` holds the top ones)
    sites: tuple[SiteStats, ...] = ()
    largest_blocks: tuple[LiveBlock, ...] = ()
    fragmentation: Fragmentation | None = None
    growing: tuple[GrowingSite, ...] = ()
    snapshot_path: str | None = None
    snapshot_bytes: int | None = None
    snapshot_error: str | None = None
    error: str | None = None
    #: sent again to a viewer that connected after the snapshot finished
    replay: bool = False
    notes: tuple[str, ...] = field(default=())

    @classmethod
    def from_wire(cls, obj: Any, where: str = "memory_snapshot_result") -> MemorySnapshotResult:
        obj = typed(obj, where)
        frag = f.child(obj, "fragmentation", where)
        return cls(
            id=f.ident(obj, "id", where),
            pid=f.opt_integer(obj, "pid", where, 1, MAX_PID),
            device=f.opt_integer(obj, "device", where, 0, 1 << 16),
            first_step=f.opt_integer(obj, "first_step", where),
            last_step=f.opt_integer(obj, "last_step", where, lo=-1),
            steps=f.opt_integer(obj, "steps", where),
            started=f.opt_number(obj, "started", where, hi=MAX_TIME_S),
            window_end_wall=f.opt_number(obj, "window_end_wall", where, hi=MAX_TIME_S),
            max_entries=f.opt_integer(obj, "max_entries", where),
            trace_entries=f.integer(obj, "trace_entries", where, default=0),
            truncated=f.flag(obj, "truncated", where),
            boundaries=f.integer(obj, "boundaries", where, default=0),
            growth_checked=f.flag(obj, "growth_checked", where),
            start_ms=f.opt_number(obj, "start_ms", where, hi=_BIG),
            stop_ms=f.opt_number(obj, "stop_ms", where, hi=_BIG),
            summary_ms=f.opt_number(obj, "summary_ms", where, hi=_BIG),
            dump_ms=f.opt_number(obj, "dump_ms", where, hi=_BIG),
            ready_after_ms=f.opt_number(obj, "ready_after_ms", where, hi=_BIG),
            alloc_count=f.integer(obj, "alloc_count", where, default=0),
            alloc_bytes=f.integer(obj, "alloc_bytes", where, default=0),
            site_count=f.integer(obj, "site_count", where, default=0),
            sites=tuple(
                SiteStats.from_wire(x, f"{where}.sites[{i}]")
                for i, x in enumerate(f.items(obj, "sites", where, MAX_SITES))
            ),
            largest_blocks=tuple(
                LiveBlock.from_wire(x, f"{where}.largest_blocks[{i}]")
                for i, x in enumerate(f.items(obj, "largest_blocks", where, MAX_BLOCKS))
            ),
            fragmentation=None
            if frag is None
            else Fragmentation.from_wire(frag, where + ".fragmentation"),
            growing=tuple(
                GrowingSite.from_wire(x, f"{where}.growing[{i}]")
                for i, x in enumerate(f.items(obj, "growing", where, MAX_GROWING))
            ),
            snapshot_path=f.opt_text(obj, "snapshot_path", where),
            snapshot_bytes=f.opt_integer(obj, "snapshot_bytes", where),
            snapshot_error=f.opt_text(obj, "snapshot_error", where),
            error=f.opt_text(obj, "error", where),
            replay=f.flag(obj, "replay", where),
            notes=f.texts(obj, "notes", where, 16, 1024),
        )

    def to_wire(self) -> dict[str, Any]:
        out = header(m.MEMSNAP_RESULT)
        out.update(
            id=self.id,
            pid=self.pid,
            device=self.device,
            first_step=self.first_step,
            last_step=self.last_step,
            steps=self.steps,
            started=self.started,
            window_end_wall=self.window_end_wall,
            max_entries=self.max_entries,
            trace_entries=self.trace_entries,
            truncated=self.truncated,
            boundaries=self.boundaries,
            growth_checked=self.growth_checked,
            start_ms=self.start_ms,
            stop_ms=self.stop_ms,
            summary_ms=self.summary_ms,
            dump_ms=self.dump_ms,
            ready_after_ms=self.ready_after_ms,
            alloc_count=self.alloc_count,
            alloc_bytes=self.alloc_bytes,
            site_count=self.site_count,
            sites=[x.to_wire() for x in self.sites],
            largest_blocks=[x.to_wire() for x in self.largest_blocks],
            fragmentation=None if self.fragmentation is None else self.fragmentation.to_wire(),
            growing=[x.to_wire() for x in self.growing],
            snapshot_path=self.snapshot_path,
            snapshot_bytes=self.snapshot_bytes,
            snapshot_error=self.snapshot_error,
            error=self.error,
            notes=list(self.notes),
        )
        if self.replay:
            out["replay"] = True
        return out
