"""The memory snapshot's summary, computed from synthetic snapshot dicts shaped like
torch's: sites, live blocks, fragmentation, growing sites, bounds."""

from __future__ import annotations

from typing import Any

import pytest

from gputui.hook._memsnap import is_marker
from gputui.hook._memsummary import is_growing, summarize
from gputui.protocol import memsnap as ms
from gputui.protocol.memsnap import MemorySnapshotResult
from tests.helpers import memsnap as h

MIB = h.MIB


def run(snapshot: dict[str, Any], **kw: Any) -> dict[str, Any]:
    kw.setdefault("skip_roots", (h.TORCH_DIR, "/site-packages/gputui/"))
    kw.setdefault("stdlib_roots", (h.STDLIB_DIR,))
    return summarize(snapshot, 0, is_marker, **kw)


def test_planted_leak_is_named_by_its_site() -> None:
    out = run(h.planted_leak(steps=5, leak_bytes=4 * MIB))
    assert out["boundaries"] == 6 and out["growth_checked"]
    assert len(out["growing"]) == 1
    leak = out["growing"][0]
    assert (leak.site.file, leak.site.line, leak.site.function) == (h.LEAK_FILE, 42, "remember")
    # alive at each boundary after the first step: one more kept tensor each time
    assert leak.live_bytes == (4 * MIB, 8 * MIB, 12 * MIB, 16 * MIB, 20 * MIB)
    assert leak.live_count == (1, 2, 3, 4, 5)
    assert leak.growth_bytes == 16 * MIB and leak.per_step_bytes == 4 * MIB
    # the site's frames start at the user's line (torch's frames skipped), outwards
    assert [f.file for f in leak.site.frames] == [h.LEAK_FILE, "/home/u/train.py"]


def test_sites_rank_by_bytes_with_live_bytes_at_the_end() -> None:
    out = run(h.planted_leak(steps=5, leak_bytes=4 * MIB))
    sites = out["sites"]
    labels = [None if s.site is None else (s.site.file, s.site.line) for s in sites]
    # three activation sites of 16 MiB per step, then autograd's (no frame), then the leak
    assert labels[:3] == [
        ("/home/u/model.py", 30),
        ("/home/u/model.py", 31),
        ("/home/u/model.py", 32),
    ]
    assert sites[0].bytes == 5 * 16 * MIB and sites[0].count == 5 and sites[0].live_bytes == 0
    no_frame = next(s for s in sites if s.site is None)
    assert no_frame.bytes == 5 * 2 * 2 * MIB and no_frame.count == 10
    leak = next(s for s in sites if s.site is not None and s.site.file == h.LEAK_FILE)
    assert (leak.live_bytes, leak.live_count) == (20 * MIB, 5)
    assert out["site_count"] == 5 and out["alloc_count"] == 5 * 6
    # markers are not allocations of the job
    assert all(s.site is None or "_memsnap" not in s.site.file for s in sites)


def test_activations_freed_each_step_and_a_warmup_cache_are_not_growing() -> None:
    snap = h.Snapshot()
    snap.marker()
    for k in range(6):
        act = snap.alloc(32 * MIB, h.user_stack("/home/u/model.py", 10))
        if k < 2:  # a cache that fills during the first two steps, then stays
            snap.alloc(MIB, h.user_stack("/home/u/cache.py", 5, "get"))
        if k == 0:  # optimizer state, created in the first step and kept
            snap.alloc(64 * MIB, h.user_stack("/home/u/train.py", 77, "main"))
        snap.free(act)
        snap.marker()
    out = run(snap.build())
    assert out["growth_checked"] and out["growing"] == ()


def test_growth_needs_three_boundaries_after_the_first_step() -> None:
    out = run(h.planted_leak(steps=2))
    assert out["boundaries"] == 3
    assert not out["growth_checked"] and out["growing"] == ()
    assert run(h.planted_leak(steps=3))["growing"]


@pytest.mark.parametrize(
    ("series", "growing"),
    [
        ((1, 2, 3), True),
        ((1, 1, 2, 3, 4), True),
        ((1, 2, 3, 3, 3, 3), False),  # stopped growing
        ((1, 2, 1, 2, 3), False),  # fell once
        ((5, 5, 5, 5), False),
        ((0, 1, 1, 2, 2), True),  # a leak every other step
        ((1, 2), False),  # too short for a verdict
    ],
)
def test_is_growing(series: tuple[int, ...], growing: bool) -> None:
    assert is_growing(series) is growing


def test_site_is_the_first_frame_outside_torch_gputui_and_the_stdlib() -> None:
    snap = h.Snapshot()
    snap.marker()
    lib = "/usr/lib/python3.11/site-packages/transformers/modeling.py"  # a library IS a site
    frames = h.stack(
        (h.TORCH_DIR + "_tensor.py", 1, "clone"),
        (h.STDLIB_DIR + "contextlib.py", 79, "inner"),
        ("/site-packages/gputui/hook/_torch_hooks.py", 300, "wrapped"),
        (lib, 512, "attention"),
        ("/home/u/train.py", 12, "main"),
    )
    snap.alloc(MIB, frames)
    snap.alloc(MIB, h.stack((h.TORCH_DIR + "optim/adam.py", 9, "_init_group")))  # torch only
    snap.marker()
    sites = {s.site.file: s.site for s in run(snap.build())["sites"] if s.site is not None}
    assert sites[lib].line == 512 and sites[lib].function == "attention"
    assert [f.file for f in sites[lib].frames] == [lib, "/home/u/train.py"]
    # nothing outside torch: the innermost frame stands for the site
    assert sites[h.TORCH_DIR + "optim/adam.py"].function == "_init_group"


def test_frames_and_names_are_bounded() -> None:
    snap = h.Snapshot()
    snap.marker()
    deep = h.stack(*[(f"/home/u/{'d' * 900}/m{i}.py", i, "f" * 1000) for i in range(40)])
    snap.alloc(MIB, deep)
    snap.marker()
    out = run(snap.build())
    site = out["sites"][0].site
    assert len(site.frames) == ms.MAX_FRAMES
    assert all(
        len(f.file) == ms.MAX_FILENAME and f.file.endswith(f"/m{i}.py")
        for i, f in enumerate(site.frames)
    )
    assert all(len(f.function) == ms.MAX_FUNCTION for f in site.frames)
    # what the hook sends decodes with the schema's own limits
    wire = MemorySnapshotResult(**out).to_wire()
    assert MemorySnapshotResult.from_wire(wire).sites[0].site == site


def test_top_lists_are_capped() -> None:
    snap = h.Snapshot()
    snap.marker()
    for i in range(ms.MAX_SITES + 15):
        snap.alloc((i + 1) * MIB, h.user_stack("/home/u/many.py", i))
    snap.marker()
    out = run(snap.build())
    assert len(out["sites"]) == ms.MAX_SITES and out["site_count"] == ms.MAX_SITES + 15
    assert out["sites"][0].bytes == (ms.MAX_SITES + 15) * MIB  # the biggest first
    assert len(out["largest_blocks"]) == ms.MAX_BLOCKS
    sizes = [b.bytes for b in out["largest_blocks"]]
    assert sizes == sorted(sizes, reverse=True)


def test_largest_blocks_say_which_came_from_the_window() -> None:
    out = run(h.planted_leak(steps=4, leak_bytes=4 * MIB))
    blocks = out["largest_blocks"]
    before = [b for b in blocks if not b.in_window]
    assert [b.bytes for b in before] == [8 * MIB, 8 * MIB] and all(b.site is None for b in before)
    kept = [b for b in blocks if b.in_window]
    assert len(kept) == 4 and all(b.site is not None and b.site.line == h.LEAK_LINE for b in kept)
    assert blocks[0].bytes == 8 * MIB and blocks[0].requested_bytes == 8 * MIB


def test_fragmentation_counts_split_inactive_blocks_and_skips_expandable_tails() -> None:
    def block(size: int, state: str) -> dict[str, Any]:
        return {"address": 0, "size": size, "requested_size": size, "state": state, "frames": []}

    segments = [
        {  # split: 6 MiB free between allocations
            "device": 0,
            "address": 0,
            "total_size": 20 * MIB,
            "allocated_size": 12 * MIB,
            "active_size": 14 * MIB,
            "requested_size": 12 * MIB,
            "stream": 0,
            "segment_type": "large",
            "is_expandable": False,
            "blocks": [
                block(8 * MIB, "active_allocated"),
                block(4 * MIB, "inactive"),
                block(4 * MIB, "active_allocated"),
                block(2 * MIB, "inactive"),
                block(2 * MIB, "active_pending_free"),
            ],
        },
        {  # one free block, not split
            "device": 0,
            "address": 1,
            "total_size": 2 * MIB,
            "allocated_size": 0,
            "active_size": 0,
            "requested_size": 0,
            "stream": 0,
            "segment_type": "small",
            "is_expandable": False,
            "blocks": [block(2 * MIB, "inactive")],
        },
        {  # expandable: its free tail is unmapped address space
            "device": 0,
            "address": 2,
            "total_size": 40 * MIB,
            "allocated_size": 40 * MIB,
            "active_size": 40 * MIB,
            "requested_size": 40 * MIB,
            "stream": 0,
            "segment_type": "large",
            "is_expandable": True,
            "blocks": [block(40 * MIB, "active_allocated"), block(2**40, "inactive")],
        },
        {  # another device's: not ours
            "device": 1,
            "address": 3,
            "total_size": 99 * MIB,
            "allocated_size": 0,
            "active_size": 0,
            "requested_size": 0,
            "stream": 0,
            "segment_type": "large",
            "is_expandable": False,
            "blocks": [block(99 * MIB, "inactive")],
        },
    ]
    out = run(h.Snapshot().build(segments=segments))
    frag = out["fragmentation"]
    assert (frag.segments, frag.large_segments, frag.small_segments, frag.expandable_segments) == (
        3,
        2,
        1,
        1,
    )
    assert frag.reserved_bytes == 62 * MIB and frag.allocated_bytes == 52 * MIB
    assert (frag.inactive_blocks, frag.inactive_bytes) == (3, 8 * MIB)
    assert (frag.inactive_split_blocks, frag.inactive_split_bytes) == (2, 6 * MIB)
    assert frag.largest_inactive_bytes == 4 * MIB and frag.pending_free_bytes == 2 * MIB
    assert frag.before_window_bytes == 52 * MIB  # no trace: all of it predates the window
    assert frag.unused_share == pytest.approx(10 / 62)
    assert any("expandable" in n for n in out["notes"])


def test_a_full_ring_is_reported_and_lost_allocations_are_not_counted() -> None:
    full = h.planted_leak(steps=6)
    trace = full["device_traces"][0]
    cut = 20
    full["device_traces"][0] = trace[cut:]  # torch's ring overwrote the oldest events
    out = run(full, max_entries=len(trace) - cut)
    assert out["truncated"] and any("overwritten" in n for n in out["notes"])
    assert out["boundaries"] < 7
    # frees of allocations the trace lost are ignored; the leak still grows
    assert out["growing"] and out["growing"][0].site.line == h.LEAK_LINE
    assert all(s.live_bytes >= 0 for s in out["sites"])


def test_empty_or_odd_snapshots_do_not_raise() -> None:
    assert run({})["boundaries"] == 0
    assert run({"segments": [], "device_traces": []})["fragmentation"] is None
    odd = {
        "segments": [None, {"device": 0, "blocks": [None, {"state": "inactive", "size": "x"}]}],
        "device_traces": [
            [
                None,
                {"action": "alloc", "addr": 1, "size": -5, "frames": "no"},
                {"action": "free_requested", "addr": 99},
            ]
        ],
    }
    out = run(odd)
    assert out["alloc_count"] == 1 and out["alloc_bytes"] == 0
    assert out["sites"][0].site is None
    assert any("no step boundary" in n for n in out["notes"])


def test_summary_of_another_device() -> None:
    snap = h.Snapshot(device=2)
    snap.marker()
    snap.alloc(MIB, h.user_stack("/home/u/x.py", 3))
    snap.marker()
    out = summarize(snap.build(), 2, is_marker)
    assert out["alloc_count"] == 1 and out["boundaries"] == 2
    assert out["fragmentation"].segments == 1
