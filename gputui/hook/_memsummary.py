"""The summary of a memory snapshot, computed in the job from the dict that
``torch.cuda.memory._snapshot()`` returns (standard library only).

The dict (torch/cuda/memory.py documents it): ``segments`` (one per cudaMalloc:
``device``, ``total_size``, ``allocated_size``, ``active_size``,
``requested_size``, ``segment_type``, ``is_expandable``, and ``blocks``, each
with ``address``, ``size``, ``requested_size``, ``state`` and ``frames``) and
``device_traces`` (per device, the allocator's events in order: ``action``
alloc / free_requested / free_completed / segment_*, ``addr``, ``size``,
``frames``).  Frames are innermost first: ``filename``, ``line``, ``name``.

Step boundaries are found in the trace itself: at each one the hook allocates
and frees a small marker block from a function of its own, so the events
between two markers belong to one step, whatever the clocks say.
"""

from __future__ import annotations

import heapq
import itertools
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gputui.protocol.memsnap import (
    MAX_BLOCKS,
    MAX_FILENAME,
    MAX_FRAMES,
    MAX_FUNCTION,
    MAX_GROWING,
    MAX_SITES,
    MIN_GROWTH_BOUNDARIES,
    AllocSite,
    Fragmentation,
    Frame,
    GrowingSite,
    LiveBlock,
    SiteStats,
)

_UNSEEN = object()
_MARKER = object()
_PACKAGES = re.compile(r"[/\\](site|dist)-packages[/\\]")
#: a site: (file, line, function) of its frame, or None (no Python frame)
SiteKey = tuple[str, int, str] | None


def _text(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else str(value)
    # A long path keeps its end: the file name and its nearest folders say most.
    return text if len(text) <= limit else "\u2026" + text[-(limit - 1) :]


def _line(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _size(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def stack_key(frames: list[Any]) -> tuple[int, ...]:
    """The identity of a stack: torch builds one dict per distinct frame and
    shares it between the stacks that hold it, so equal stacks give equal keys
    (and a key is valid while the snapshot dict keeps the frames alive)."""
    return tuple(map(id, frames))


class Sites:
    """Turns frame lists into sites, once per distinct stack (see
    :func:`stack_key`): the walk is done for a few hundred stacks, not for every
    one of a hundred thousand events."""

    def __init__(self, skip_roots: Sequence[str], stdlib_roots: Sequence[str] = ()) -> None:
        self.skip_roots = tuple(r for r in skip_roots if r)
        self.stdlib_roots = tuple(r for r in stdlib_roots if r)
        self.cache: dict[tuple[int, ...], SiteKey] = {}
        self.sites: dict[tuple[str, int, str], AllocSite] = {}

    def _skipped(self, filename: str) -> bool:
        if filename.startswith(self.skip_roots) or filename.startswith("<frozen "):
            return True
        # Some installs keep site-packages inside the standard library's folder:
        # a library there is a site, as anywhere else.
        return filename.startswith(self.stdlib_roots) and not _PACKAGES.search(filename)

    def key(self, frames: Any) -> SiteKey:
        if not frames or not isinstance(frames, list):
            return None
        ident = stack_key(frames)
        if ident in self.cache:
            return self.cache[ident]
        chosen = 0
        for i, frame in enumerate(frames):
            filename = frame.get("filename") if isinstance(frame, Mapping) else None
            if isinstance(filename, str) and not self._skipped(filename):
                chosen = i
                break
        # (no frame outside torch and the standard library: the innermost one)
        picked = [
            fr
            for fr in (self._frame(x) for x in frames[chosen : chosen + MAX_FRAMES])
            if fr is not None
        ]
        key: SiteKey = None
        if picked:
            first = picked[0]
            key = (first.file, first.line, first.function)
            if key not in self.sites:
                self.sites[key] = AllocSite(first.file, first.line, first.function, tuple(picked))
        self.cache[ident] = key
        return key

    @staticmethod
    def _frame(frame: Any) -> Frame | None:
        if not isinstance(frame, Mapping):
            return None
        return Frame(
            file=_text(frame.get("filename", "?"), MAX_FILENAME),
            line=_line(frame.get("line")),
            function=_text(frame.get("name", ""), MAX_FUNCTION),
        )

    def site(self, key: SiteKey) -> AllocSite | None:
        return None if key is None else self.sites.get(key)


def is_growing(series: Sequence[int]) -> bool:
    """Live bytes at consecutive step boundaries that keep growing: never falling,
    rising at half the intervals or more (at least twice), and still rising in the
    second half (a cache that fills during the first steps and stops is not a
    leak)."""
    n = len(series)
    if n < MIN_GROWTH_BOUNDARIES:
        return False
    steps = [b - a for a, b in itertools.pairwise(series)]
    if any(d < 0 for d in steps):
        return False
    rises = sum(1 for d in steps if d > 0)
    half = math.ceil(len(steps) / 2)
    return rises >= max(2, half) and any(d > 0 for d in steps[-half:])


def summarize(
    snapshot: Mapping[str, Any],
    device: int | None,
    is_marker: Callable[[Any], bool],
    skip_roots: Sequence[str] = (),
    stdlib_roots: Sequence[str] = (),
    max_entries: int | None = None,
) -> dict[str, Any]:
    """The summary fields of a :class:`~gputui.protocol.memsnap.MemorySnapshotResult`.

    ``device``: the job's CUDA device (None: every device's segments, the first
    trace); ``is_marker(frames)`` tells the hook's step-boundary markers;
    ``skip_roots``: path prefixes of code that is never an allocation site (torch,
    gputui); ``stdlib_roots``: the standard library's, skipped outside
    site-packages."""
    sites = Sites(skip_roots, stdlib_roots)
    traces = snapshot.get("device_traces") or []
    index = device if device is not None else 0
    trace = traces[index] if isinstance(traces, list) and 0 <= index < len(traces) else []
    if not isinstance(trace, list):
        trace = []
    notes: list[str] = []
    walk = _walk(trace, sites, is_marker)
    live, total, alive, at_boundary = walk.live, walk.total, walk.alive, walk.at_boundary
    truncated = bool(max_entries) and len(trace) >= (max_entries or 0)
    if truncated:
        notes.append(
            f"the window held more allocator events than the {max_entries:,} kept: the oldest "
            "were overwritten (ask for fewer steps or more entries)"
        )
    if not at_boundary:
        notes.append("no step boundary was found in the allocator's trace")

    growth_checked, growing = _growing(at_boundary, sites)

    top = heapq.nlargest(MAX_SITES, total.items(), key=lambda item: (item[1][0], item[1][1]))
    site_rows = tuple(
        SiteStats(
            site=sites.site(key),
            bytes=row[0],
            count=row[1],
            live_bytes=max(0, alive.get(key, [0, 0])[0]),
            live_count=max(0, alive.get(key, [0, 0])[1]),
        )
        for key, row in top
    )
    frag, blocks = _segments(snapshot.get("segments") or [], device, live, sites, notes)
    return {
        "trace_entries": len(trace),
        "truncated": truncated,
        "boundaries": len(at_boundary),
        "growth_checked": growth_checked,
        "alloc_count": walk.alloc_count,
        "alloc_bytes": walk.alloc_bytes,
        "site_count": len(total),
        "sites": site_rows,
        "largest_blocks": blocks,
        "fragmentation": frag,
        "growing": tuple(growing[:MAX_GROWING]),
        "notes": tuple(notes),
    }


@dataclass
class _Walk:
    """What one pass over the allocator's trace found."""

    #: addr -> (site, bytes) of the window's allocations still alive
    live: dict[int, tuple[SiteKey, int]]
    #: site -> [bytes, count] allocated in the window
    total: dict[SiteKey, list[int]]
    #: site -> [bytes, count] alive now
    alive: dict[SiteKey, list[int]]
    #: what was alive at each step boundary, per site: (bytes, count)
    at_boundary: list[dict[SiteKey, tuple[int, int]]]
    alloc_count: int
    alloc_bytes: int


def _walk(trace: list[Any], sites: Sites, is_marker: Callable[[Any], bool]) -> _Walk:
    live: dict[int, tuple[SiteKey, int]] = {}
    total: dict[SiteKey, list[int]] = {}
    alive: dict[SiteKey, list[int]] = {}
    at_boundary: list[dict[SiteKey, tuple[int, int]]] = []
    markers: set[int] = set()
    #: stack -> its site, or _MARKER: one lookup per event (see stack_key)
    keys: dict[tuple[int, ...], Any] = {}
    alloc_count = alloc_bytes = 0
    for event in trace:
        if type(event) is not dict and not isinstance(event, Mapping):
            continue
        action = event.get("action")
        if action == "alloc":
            addr = event.get("addr")
            frames = event.get("frames")
            ident = tuple(map(id, frames)) if type(frames) is list else ()
            key = keys.get(ident, _UNSEEN)
            if key is _UNSEEN:
                key = keys[ident] = _MARKER if ident and is_marker(frames) else sites.key(frames)
            if key is _MARKER:
                markers.add(addr)  # type: ignore[arg-type]
                at_boundary.append({k: (v[0], v[1]) for k, v in alive.items() if v[1]})
                continue
            size = event.get("size")
            if type(size) is not int or size < 0:
                size = _size(size)
            live[addr] = (key, size)  # type: ignore[index]
            row = total.get(key)
            if row is None:
                row = total[key] = [0, 0]
                alive[key] = [0, 0]
            row[0] += size
            row[1] += 1
            now = alive[key]
            now[0] += size
            now[1] += 1
            alloc_count += 1
            alloc_bytes += size
        elif action == "free_requested":
            addr = event.get("addr")
            if addr in markers:
                continue
            item = live.pop(addr, None)  # type: ignore[arg-type]
            if item is not None:  # (an allocation older than the trace: not ours to count)
                now = alive[item[0]]
                now[0] -= item[1]
                now[1] -= 1
        elif action == "free_completed":
            markers.discard(event.get("addr"))  # type: ignore[arg-type]
    return _Walk(live, total, alive, at_boundary, alloc_count, alloc_bytes)


def _growing(
    at_boundary: list[dict[SiteKey, tuple[int, int]]], sites: Sites
) -> tuple[bool, list[GrowingSite]]:
    """Whether there were enough boundaries to judge growth, and the sites whose
    live bytes grew across them, most first."""
    # The first boundary opens the window (nothing of it is alive yet, or only
    # part of a step when the trace was cut): growth is read from the next ones.
    series_at = at_boundary[1:]
    growth_checked = len(series_at) >= MIN_GROWTH_BOUNDARIES
    growing: list[GrowingSite] = []
    if growth_checked:
        for key in {k for snap in series_at for k in snap}:
            values = [snap.get(key, (0, 0)) for snap in series_at]
            series = [v[0] for v in values]
            if not is_growing(series):
                continue
            growth = series[-1] - series[0]
            growing.append(
                GrowingSite(
                    site=sites.site(key),
                    live_bytes=tuple(series),
                    live_count=tuple(v[1] for v in values),
                    growth_bytes=growth,
                    per_step_bytes=round(growth / (len(series) - 1), 1),
                )
            )
        growing.sort(key=lambda g: -g.growth_bytes)
    return growth_checked, growing


def _segments(
    segments: Iterable[Any],
    device: int | None,
    live: Mapping[int, tuple[SiteKey, int]],
    sites: Sites,
    notes: list[str],
) -> tuple[Fragmentation | None, tuple[LiveBlock, ...]]:
    """Fragmentation over the device's segments, and its largest allocated blocks."""
    count = large = small = expandable = 0
    reserved = allocated = active = requested = 0
    inactive_n = inactive_b = split_n = split_b = largest_free = pending = before = 0
    allocated_blocks: list[tuple[int, int, Mapping[str, Any], Mapping[str, Any]]] = []
    for seg in segments:
        if not isinstance(seg, Mapping):
            continue
        if device is not None and seg.get("device", device) != device:
            continue
        count += 1
        reserved += _size(seg.get("total_size"))
        allocated += _size(seg.get("allocated_size"))
        active += _size(seg.get("active_size"))
        requested += _size(seg.get("requested_size"))
        if seg.get("segment_type") == "small":
            small += 1
        else:
            large += 1
        is_expandable = bool(seg.get("is_expandable"))
        expandable += is_expandable
        blocks = seg.get("blocks") or []
        split = len(blocks) > 1
        for block in blocks:
            if not isinstance(block, Mapping):
                continue
            state = block.get("state")
            size = _size(block.get("size"))
            if state == "active_allocated":
                address = block.get("address")
                if address not in live:
                    before += size
                # (sequence number: ties never compare the dicts)
                allocated_blocks.append((size, len(allocated_blocks), block, seg))
            elif state == "inactive" and not is_expandable:
                # An expandable segment's free tail is unmapped address space,
                # not cached memory: it is left out.
                inactive_n += 1
                inactive_b += size
                largest_free = max(largest_free, size)
                if split:
                    split_n += 1
                    split_b += size
            elif state == "active_pending_free":
                pending += size
    if not count:
        return None, ()
    if expandable:
        notes.append(
            f"{expandable} expandable segment(s): their unmapped space is not counted as free"
        )
    frag = Fragmentation(
        segments=count,
        reserved_bytes=reserved,
        allocated_bytes=allocated,
        active_bytes=active,
        requested_bytes=requested,
        large_segments=large,
        small_segments=small,
        expandable_segments=expandable,
        inactive_blocks=inactive_n,
        inactive_bytes=inactive_b,
        inactive_split_blocks=split_n,
        inactive_split_bytes=split_b,
        largest_inactive_bytes=largest_free,
        pending_free_bytes=pending,
        before_window_bytes=before,
    )
    biggest = heapq.nlargest(MAX_BLOCKS, allocated_blocks, key=lambda item: (item[0], -item[1]))
    rows = []
    for size, _, block, seg in biggest:
        address = block.get("address")
        mine = live.get(address) if isinstance(address, int) else None
        key = mine[0] if mine is not None else sites.key(block.get("frames"))
        stream = seg.get("stream")
        rows.append(
            LiveBlock(
                bytes=size,
                requested_bytes=_size(block.get("requested_size")),
                stream=stream if isinstance(stream, int) and not isinstance(stream, bool) else 0,
                segment_type=_text(seg.get("segment_type", ""), 32),
                in_window=mine is not None,
                site=sites.site(key),
            )
        )
    return frag, tuple(rows)
