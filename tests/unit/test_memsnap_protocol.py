"""The memory snapshot messages on the wire: round trips (hypothesis), ranges and
bounds that name the field, and how a viewer decodes them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputui.client.hook import Invalid, parse_event
from gputui.protocol import framing, messages
from gputui.protocol import memsnap as ms
from gputui.protocol.fields import SchemaError
from gputui.protocol.memsnap import (
    AllocSite,
    Fragmentation,
    Frame,
    GrowingSite,
    LiveBlock,
    MemorySnapshotRequest,
    MemorySnapshotResult,
    MemorySnapshotStatus,
    SiteStats,
)
from gputui.protocol.wire import decode

counts = st.integers(0, 2**62)
names = st.text(max_size=40)
frames = st.builds(
    Frame, file=st.text(max_size=ms.MAX_FILENAME), line=st.integers(0, 10**6), function=names
)
sites = st.builds(
    AllocSite,
    file=st.text(max_size=80),
    line=st.integers(0, 10**6),
    function=names,
    frames=st.lists(frames, max_size=ms.MAX_FRAMES).map(tuple),
)
maybe_site = st.none() | sites
results = st.builds(
    MemorySnapshotResult,
    id=st.none() | st.text(max_size=20),
    pid=st.none() | st.integers(1, 2**31 - 1),
    device=st.none() | st.integers(0, 16),
    first_step=st.none() | counts,
    steps=st.none() | st.integers(1, ms.MAX_STEPS),
    trace_entries=counts,
    truncated=st.booleans(),
    boundaries=st.integers(0, 101),
    growth_checked=st.booleans(),
    stop_ms=st.none() | st.floats(0, 1e6),
    sites=st.lists(
        st.builds(SiteStats, maybe_site, counts, counts, counts, counts), max_size=ms.MAX_SITES
    ).map(tuple),
    largest_blocks=st.lists(
        st.builds(
            LiveBlock,
            counts,
            counts,
            st.integers(-(2**63), 2**63 - 1),
            st.sampled_from(["large", "small"]),
            st.booleans(),
            maybe_site,
        ),
        max_size=ms.MAX_BLOCKS,
    ).map(tuple),
    fragmentation=st.none() | st.builds(Fragmentation, counts, counts, counts, counts, counts),
    growing=st.lists(
        st.builds(
            GrowingSite,
            maybe_site,
            st.lists(counts, max_size=ms.MAX_STEPS + 1).map(tuple),
            st.lists(counts, max_size=ms.MAX_STEPS + 1).map(tuple),
            counts,
            st.floats(0, 2**40),
        ),
        max_size=ms.MAX_GROWING,
    ).map(tuple),
    snapshot_path=st.none() | st.text(max_size=100),
    notes=st.lists(st.text(max_size=50), max_size=5).map(tuple),
    replay=st.booleans(),
)


@settings(max_examples=25, deadline=None)
@given(results)
def test_result_round_trips_through_a_frame(result: MemorySnapshotResult) -> None:
    frame = framing.encode_obj(result.to_wire())
    (obj,) = framing.FrameReader().feed(frame)
    assert decode(obj) == result
    assert isinstance(parse_event(obj), MemorySnapshotResult)


@given(st.integers(1, ms.MAX_STEPS), st.integers(ms.MIN_ENTRIES, ms.MAX_ENTRIES))
def test_request_round_trips(steps: int, entries: int) -> None:
    req = MemorySnapshotRequest(id="7-m1", steps=steps, max_entries=entries)
    assert decode(json.loads(json.dumps(req.to_wire()))) == req


def test_a_full_result_fits_in_one_frame() -> None:
    """The bounds keep the biggest possible summary well under the frame limit."""
    long_frames = tuple(
        Frame("f" * ms.MAX_FILENAME, 2**31, "n" * ms.MAX_FUNCTION) for _ in range(ms.MAX_FRAMES)
    )
    site = AllocSite("f" * ms.MAX_FILENAME, 1, "n" * ms.MAX_FUNCTION, long_frames)
    big = 2**62
    result = MemorySnapshotResult(
        sites=tuple(SiteStats(site, big, big, big, big) for _ in range(ms.MAX_SITES)),
        largest_blocks=tuple(
            LiveBlock(big, big, 2**63 - 1, "large", True, site) for _ in range(ms.MAX_BLOCKS)
        ),
        growing=tuple(
            GrowingSite(site, (big,) * (ms.MAX_STEPS + 1), (big,) * (ms.MAX_STEPS + 1), big, 1e12)
            for _ in range(ms.MAX_GROWING)
        ),
        fragmentation=Fragmentation(1, big, big),
        notes=tuple("x" * 1024 for _ in range(16)),
        snapshot_path="p" * 4096,
    )
    frame = framing.encode_obj(result.to_wire())
    assert len(frame) < framing.MAX_FRAME // 2
    assert decode(framing.FrameReader().feed(frame)[0]) == result


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ({"steps": 0}, "memory_snapshot.steps"),
        ({"steps": ms.MAX_STEPS + 1}, "memory_snapshot.steps"),
        ({"steps": "5"}, "memory_snapshot.steps"),
        ({"max_entries": ms.MIN_ENTRIES - 1}, "memory_snapshot.max_entries"),
        ({"max_entries": ms.MAX_ENTRIES + 1}, "memory_snapshot.max_entries"),
        ({"id": ["x"]}, "memory_snapshot.id"),
    ],
)
def test_request_ranges_name_the_field(obj: dict[str, Any], field: str) -> None:
    with pytest.raises(SchemaError) as info:
        decode({"v": 1, "type": messages.MEMSNAP, **obj})
    assert info.value.field == field


def result_wire(**extra: Any) -> dict[str, Any]:
    obj = MemorySnapshotResult(id="a", sites=(SiteStats(None, 1, 1),)).to_wire()
    obj.update(extra)
    return obj


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (
            {"sites": [{"bytes": 1, "count": 1}] * (ms.MAX_SITES + 1)},
            "memory_snapshot_result.sites",
        ),
        ({"sites": [{"bytes": -1, "count": 1}]}, "memory_snapshot_result.sites[0].bytes"),
        (
            {"sites": [{"bytes": 1, "count": 1, "site": {"file": "x" * (ms.MAX_FILENAME + 1)}}]},
            "memory_snapshot_result.sites[0].site.file",
        ),
        (
            {"sites": [{"bytes": 1, "count": 1, "site": {"file": "x", "frames": [{}] * 9}}]},
            "memory_snapshot_result.sites[0].site.frames",
        ),
        (
            {"growing": [{"live_bytes": [1, "2"]}]},
            "memory_snapshot_result.growing[0].live_bytes[1]",
        ),
        ({"growing": [{"live_bytes": [1] * 102}]}, "memory_snapshot_result.growing[0].live_bytes"),
        ({"largest_blocks": [{"bytes": 1.5}]}, "memory_snapshot_result.largest_blocks[0].bytes"),
        ({"fragmentation": {"segments": 1}}, "memory_snapshot_result.fragmentation.reserved_bytes"),
        ({"truncated": "yes"}, "memory_snapshot_result.truncated"),
        ({"stop_ms": float("nan")}, "memory_snapshot_result.stop_ms"),
        ({"notes": ["n"] * 17}, "memory_snapshot_result.notes"),
    ],
)
def test_result_bounds_name_the_field(extra: dict[str, Any], field: str) -> None:
    with pytest.raises(SchemaError) as info:
        MemorySnapshotResult.from_wire(result_wire(**extra))
    assert info.value.field == field


def test_a_viewer_turns_a_bad_result_into_one_invalid_event() -> None:
    event = parse_event(result_wire(sites="all of them"))
    assert isinstance(event, Invalid) and event.type == messages.MEMSNAP_RESULT
    assert "memory_snapshot_result.sites" in event.error


def test_a_request_from_the_hook_is_invalid_and_unknown_keys_are_ignored() -> None:
    request = MemorySnapshotRequest(id="x").to_wire()
    assert isinstance(parse_event(request), Invalid)
    status = MemorySnapshotStatus(ms.RECORDING, "x", step=3, steps=5).to_wire()
    status["from_a_newer_hook"] = {"anything": 1}
    assert parse_event(status) == MemorySnapshotStatus(ms.RECORDING, "x", None, 3, 5)


def test_status_states() -> None:
    for state in ms.ACTIVE:
        assert MemorySnapshotStatus(state).active
    for state in ms.ENDED:
        assert MemorySnapshotStatus(state).ended
    assert ms.STATES == ms.ACTIVE | ms.ENDED and not ms.ACTIVE & ms.ENDED
