"""The attach screen's memory snapshot view (key m): from a recorded summary, from
a recording without one, and live over a feed that answers like a hook."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from gputui.client.hook import parse_event
from gputui.protocol import memsnap as ms
from gputui.protocol.memsnap import MemorySnapshotStatus
from gputui.protocol.schema import StepBatch, StepRecord
from gputui.recording.attach import read_attach_recording
from gputui.reports import memory as memory_report
from gputui.reports.memsnap_view import GROWING_NOTE, memsnap_view
from gputui.session.attach import AttachState
from gputui.tui.attach import AttachScreen, ReplayFeed, make_attach_app
from gputui.tui.attach.memory_snapshot import (
    MemorySnapshotPanel,
    MemorySnapshotScreen,
    memory_text,
    progress,
)
from tests.helpers import memsnap as h
from tests.helpers.synthetic import wait_for


def panel_text(app: Any) -> str:
    screen = app.screen
    if not isinstance(screen, MemorySnapshotScreen):
        return ""
    return screen.query_one(MemorySnapshotPanel).plain


async def test_a_recorded_snapshot_is_shown_with_m(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl.gz"
    h.record_session(path)
    app = make_attach_app(ReplayFeed.from_file(path), autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        attach = app.screen
        assert isinstance(attach, AttachScreen)
        attach.replay_to()
        await pilot.press("m")
        await wait_for(pilot, lambda: isinstance(app.screen, MemorySnapshotScreen))
        await wait_for(pilot, lambda: "Growing allocations" in panel_text(app))
        text = panel_text(app)
        assert "steps 100..104 (5 steps) on device 0" in text
        assert "Growing allocations" in text and "leaky.py:42 (remember)" in text
        assert "+4.0MiB" in text and "at /home/u/leaky.py:42 in remember" in text
        assert "Top allocation sites" in text and "model.py:30 (forward)" in text
        assert "(no Python frame: backward or C++)" in text
        assert "Largest live blocks" in text and "allocated before the window" in text
        assert "4242-20260101-120000-steps100-104.pickle" in text and "memory_viz" in text
        assert "s: snapshot" not in text  # a recording cannot take one
        # the analyzer saw the snapshot too
        assert attach.view is not None
        assert [f.rule for f in attach.view.findings if f.rule == "memory.leak_site"]
        await pilot.press("s")  # refused: nothing is sent, the screen stays
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, AttachScreen))


async def test_an_old_recording_without_one_says_so() -> None:
    app = make_attach_app(ReplayFeed.demo(), autostart=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        app.screen.replay_to()  # type: ignore[attr-defined]
        await pilot.press("m")
        await wait_for(pilot, lambda: isinstance(app.screen, MemorySnapshotScreen))
        await wait_for(pilot, lambda: "this recording holds no memory snapshot" in panel_text(app))


def test_recordings_keep_the_messages_as_sent(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl.gz"
    h.record_session(path)
    recording = read_attach_recording(path)
    kinds = [msg["type"] for _, msg in recording.messages]
    assert kinds.count("memory_snapshot_result") == 1
    events = [parse_event(msg) for _, msg in recording.messages]
    assert any(getattr(e, "growing", None) for e in events)
    with gzip.open(path, "rt") as fh:
        assert all(json.loads(line) for line in fh)


class AnsweringFeed:
    """A live feed whose hook answers a memory snapshot request with ``answer``
    (a list of messages), delivered at once into the state."""

    is_replay = False
    pid = 4242
    label = "pid 4242"

    def __init__(self, answer: list[dict[str, Any]]) -> None:
        self.answer = answer
        self.state: AttachState | None = None
        self.requests: list[int] = []

    def connect(self, state: AttachState) -> None:
        self.state = state
        state.set_hello(h.HELLO)
        state.add(
            StepBatch(tuple(StepRecord(i, float(i), 0.05, {"forward": 0.05}) for i in range(30)))
        )

    def now(self) -> float:
        return 1_700_000_000.0

    def request_capture(self, steps: int) -> str:
        raise AssertionError("not asked for")

    def request_memory_snapshot(self, steps: int) -> str:
        self.requests.append(steps)
        assert self.state is not None
        for msg in self.answer:
            event = parse_event(msg)
            assert event is not None
            self.state.add(event)
        return "m1"

    def close(self) -> None:
        pass


async def test_live_m_starts_a_snapshot_and_shows_its_result() -> None:
    feed = AnsweringFeed(
        [
            MemorySnapshotStatus(ms.ARMED, "m1", steps=5).to_wire(),
            h.result(h.planted_leak(), id="m1").to_wire(),
        ]
    )
    app = make_attach_app(feed)  # type: ignore[arg-type]
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("m")
        await wait_for(pilot, lambda: isinstance(app.screen, MemorySnapshotScreen))
        await wait_for(pilot, lambda: "leaky.py:42" in panel_text(app))
        assert feed.requests == [5]
        assert "s: snapshot 5 steps" in panel_text(app)
        await pilot.press("s")  # another one
        await wait_for(pilot, lambda: len(feed.requests) == 2)


async def test_live_refusal_is_shown_and_does_not_block_the_next_try() -> None:
    reason = "memory snapshots need a CUDA job: CUDA is not in use in this process"
    feed = AnsweringFeed([MemorySnapshotStatus(ms.UNSUPPORTED, "m1", reason).to_wire()])
    app = make_attach_app(feed)  # type: ignore[arg-type]
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.press("m")
        await wait_for(pilot, lambda: isinstance(app.screen, MemorySnapshotScreen))
        await wait_for(pilot, lambda: "need a CUDA job" in panel_text(app))
        assert "memory snapshot unsupported" in panel_text(app)
        await pilot.press("s")
        await wait_for(pilot, lambda: len(feed.requests) == 2)


def test_progress_lines_follow_the_hook_states() -> None:
    state = AttachState()
    state.set_hello(h.HELLO)
    state.add(StepBatch(tuple(StepRecord(i, float(i), 0.05, {}) for i in range(12))))
    state.set_memsnap_wanted("m1")
    assert progress(state.snapshot()) == (
        "yellow",
        "memory snapshot requested, waiting for the hook",
    )
    state.add(MemorySnapshotStatus(ms.RECORDING, "m1", step=9, steps=5))
    assert "step 3/5 (from step 9)" in progress(state.snapshot())[1]  # type: ignore[index]
    state.add(MemorySnapshotStatus(ms.PROCESSING, "m1"))
    assert "processing" in progress(state.snapshot())[1]  # type: ignore[index]
    state.add(h.result(h.planted_leak(), id="m1"))
    snap = state.snapshot()
    assert progress(snap) is None and snap.memsnap_wanted is None


def test_job_text_is_cleaned_in_the_view() -> None:
    state = AttachState()
    state.set_hello(h.HELLO)
    evil = h.Snapshot()
    evil.marker()
    for _ in range(4):
        evil.alloc(2**20, h.user_stack("/x/\x1b[2Jevil\x07.py", 3, "f\x1b]0;t\x07"))
        evil.marker()
    state.add(h.result(evil.build(), snapshot_path="/tmp/\x1b[31mx"))
    text = memory_text(state.snapshot(), 120, ascii_only=True, live=True)
    assert "\x1b" not in text.plain and "\x07" not in text.plain
    assert "\\x1b" in text.plain


def test_an_answer_that_beats_the_request_call_does_not_leave_it_pending() -> None:
    state = AttachState()
    state.add(MemorySnapshotStatus(ms.BUSY, "m7", "a profiler capture is in progress"))
    state.set_memsnap_wanted("m7")  # the worker thread returns after the reader delivered
    assert state.snapshot().memsnap_wanted is None
    state.set_memsnap_wanted("m8")
    assert state.snapshot().memsnap_wanted == "m8"


class CpuJobFeed(AnsweringFeed):
    """A live CPU job: its hello names no CUDA device."""

    def connect(self, state: AttachState) -> None:
        super().connect(state)
        state.set_hello(dataclasses.replace(h.HELLO, device=None, cuda_in_use=False))


async def test_live_m_on_a_cpu_job_asks_nothing_and_says_why() -> None:
    """m on a CPU job: no request the hook can only refuse, and a notice that
    fits 80 columns, whole."""
    feed = CpuJobFeed([])
    app = make_attach_app(feed)  # type: ignore[arg-type]
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("m")
        await wait_for(pilot, lambda: isinstance(app.screen, MemorySnapshotScreen))
        await wait_for(pilot, lambda: "CPU job" in panel_text(app))
        await pilot.pause()
        assert feed.requests == []
        text = panel_text(app)
        assert "no memory snapshot for a CPU job" in text and "RSS" in text
        panel = app.screen.query_one(MemorySnapshotPanel)
        assert all(len(line) <= panel.content_region.width for line in text.splitlines())


@pytest.mark.parametrize(
    "result",
    [
        h.result(h.planted_leak()),
        h.result(h.planted_leak(steps=2)),
        h.result(h.planted_leak(leak=False), snapshot_path=None, snapshot_error="disk full"),
    ],
    ids=["leak", "not judged", "none growing"],
)
def test_the_screen_and_the_printed_report_say_the_same_sentences(
    result: ms.MemorySnapshotResult,
) -> None:
    """One view model, two faces: every sentence of the snapshot is worded once."""
    state = AttachState()
    state.set_hello(h.HELLO)
    state.add(result)
    screen = " ".join(
        memory_text(state.snapshot(), 400, ascii_only=False, live=False).plain.split()
    )
    printed = " ".join(" ".join(memory_report.render(result, [], width=400)).split())
    v = memsnap_view(result)
    sentences = [v.window, v.counts, v.cost, v.sites_note, v.file, *v.notes]
    if v.allocator is not None:
        sentences += [v.allocator.used, *v.allocator.lines]
    sentences += [v.growing_verdict] if v.growing_verdict else [GROWING_NOTE]
    sentences += [f"at {f.where} in {f.function}" for f in v.top_frames]
    for said in sentences:
        assert said in screen and said in printed, said
