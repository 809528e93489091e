"""The attach screen's roofline (key l): live, it asks the hook for a capture with
FLOPs and places the result's op rows on the GPU's roof; a recording without one
says so; op names from the job are cleaned."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from gputui.ceilings.datasheet import H100_SXM
from gputui.protocol import messages
from gputui.protocol.capture import CaptureOptions, CaptureResult, CaptureStatus
from gputui.protocol.schema import StepBatch, StepRecord
from gputui.session.attach import AttachState
from gputui.trace.op_rows import rows_from_chrome_trace
from gputui.tui.attach import ReplayFeed, make_attach_app
from gputui.tui.attach.roofline_view import RooflinePanel, RooflineScreen, roofline_text_of
from tests.helpers import memsnap as h
from tests.helpers.synthetic import wait_for

TRACE = Path(__file__).parents[1] / "data" / "h100_healthy_flops_step11.pt.trace.json.gz"


def h100_rows() -> tuple[Any, ...]:
    with gzip.open(TRACE, "rt") as fh:
        return tuple(rows_from_chrome_trace(json.load(fh), top=50))


def result(cid: str = "c1", **kw: Any) -> CaptureResult:
    return CaptureResult(
        id=cid,
        first_step=40,
        last_step=44,
        steps=5,
        options=CaptureOptions(shapes=True, flops=True),
        op_rows=h100_rows(),
        **kw,
    )


def panel_text(app: Any) -> str:
    screen = app.screen
    if not isinstance(screen, RooflineScreen):
        return ""
    return screen.query_one(RooflinePanel).plain


class CapturingFeed:
    """A live feed whose hook answers a capture request with a result that has
    the op rows of a real H100 capture."""

    is_replay = False
    pid = 4242
    label = "pid 4242"

    def __init__(self) -> None:
        self.state: AttachState | None = None
        self.requests: list[tuple[int, bool]] = []

    def connect(self, state: AttachState) -> None:
        self.state = state
        state.set_hello(h.HELLO)
        state.set_roof(H100_SXM.roof())
        state.add(StepBatch(tuple(StepRecord(i, float(i), 0.05, {}) for i in range(30))))

    def now(self) -> float:
        return 1_700_000_000.0

    def request_capture(self, steps: int, flops: bool = False) -> str:
        self.requests.append((steps, flops))
        assert self.state is not None
        cid = f"c{len(self.requests)}"
        self.state.add(CaptureStatus(messages.CAPTURE_RECORDING, cid, step=40, steps=steps))
        self.state.add(result(cid))
        return cid

    def request_memory_snapshot(self, steps: int) -> str:
        raise AssertionError("not asked for")

    def close(self) -> None:
        pass


async def test_live_l_captures_with_flops_and_shows_the_roofline() -> None:
    feed = CapturingFeed()
    app = make_attach_app(feed)  # type: ignore[arg-type]
    async with app.run_test(size=(120, 50)) as pilot:
        await pilot.pause()
        await pilot.press("l")
        await wait_for(pilot, lambda: isinstance(app.screen, RooflineScreen))
        await wait_for(pilot, lambda: "aten::mm 8192x1024" in panel_text(app))
        assert feed.requests == [(5, True)]
        text = panel_text(app)
        assert "Roofline: the top ops against H100 SXM5 80GB datasheet" in text
        assert "capture steps 40..44" in text
        assert "/ memory roof, - compute roof" in text  # the plot
        line = next(x for x in text.splitlines() if "aten::mm 8192x1024 · 1024x4096" in x)
        assert "bf16" in line and "compute" in line
        await pilot.press("p")  # another one
        await wait_for(pilot, lambda: len(feed.requests) == 2)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, RooflineScreen))


async def test_a_recording_without_flops_says_so() -> None:
    app = make_attach_app(ReplayFeed.demo(), autostart=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        app.screen.replay_to()  # type: ignore[attr-defined]
        await pilot.press("l")
        await wait_for(pilot, lambda: isinstance(app.screen, RooflineScreen))
        await wait_for(pilot, lambda: "no capture with FLOPs" in panel_text(app))


@pytest.mark.parametrize("ascii_only", [False, True])
def test_op_names_from_the_job_are_cleaned(ascii_only: bool) -> None:
    state = AttachState()
    state.set_hello(h.HELLO)
    state.set_roof(H100_SXM.roof())
    rows = list(h100_rows())
    rows[0] = dataclasses.replace(rows[0], name="aten::mm\x1b]0;owned\x07\x1b[2J")
    state.add(dataclasses.replace(result(), op_rows=tuple(rows)))
    text = roofline_text_of(state.snapshot(), 100, ascii_only, live=True).plain
    assert "\x1b" not in text and "\x07" not in text and "\\x1b" in text
    if ascii_only:
        assert "·" not in text


def test_no_roof_and_no_flops_are_explained() -> None:
    state = AttachState()
    state.set_hello(h.HELLO)  # an H100 whose ceilings are not known (yet)
    text = roofline_text_of(state.snapshot(), 100, False, live=True).plain
    assert "no ceilings known for NVIDIA H100 80GB HBM3" in text and "gputui bench" in text
    state.set_roof(H100_SXM.roof())
    state.add(dataclasses.replace(result(), options=CaptureOptions(), op_rows=()))
    text = roofline_text_of(state.snapshot(), 100, False, live=True).plain
    assert "recorded without FLOPs and shapes" in text and "p captures 5 steps" in text


def test_a_cpu_job_is_told_what_applies_to_it() -> None:
    """l on a CPU job: gputui bench measures a CUDA device, so it is no advice for
    it; the phases and the CPU ops are."""
    state = AttachState()
    state.set_hello(dataclasses.replace(h.HELLO, device=None, cuda_in_use=False))
    for live in (True, False):
        text = roofline_text_of(state.snapshot(), 80, False, live=live).plain
        assert "no roofline for a CPU job" in text and "CPU ops" in text
        assert "bench" not in text
        assert ("p there profiles 5 steps" in text) is live


async def test_a_real_h100_capture_with_flops_on_the_roofline() -> None:
    """A session recorded on an H100 (bf16 transformer, 5-step capture with FLOPs):
    its op rows replay onto the H100's roof."""
    path = Path(__file__).parents[1] / "data" / "h100" / "transformer_flops.jsonl.gz"
    app = make_attach_app(ReplayFeed.from_file(path), autostart=False)
    async with app.run_test(size=(120, 50)) as pilot:
        await pilot.pause()
        app.screen.replay_to()  # type: ignore[attr-defined]
        await pilot.press("l")
        await wait_for(pilot, lambda: "Roofline: the top ops against H100" in panel_text(app))
        text = panel_text(app)
        assert "op signatures" in text and "/ memory roof" in text
        rows = [line for line in text.splitlines() if line[:3].strip().isdigit()]
        assert len(rows) == 10 and any("compute" in r for r in rows)
