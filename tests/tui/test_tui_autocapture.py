"""The attach screen's automatic capture, live against real CPU torch jobs under
the hook (`gputui run`): off until the key turns it on, then one capture with
FLOPs once the job is steady, and the line that says what it cost; the user's
p waits for it, and runs after it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gputui.session.autocapture import ASKED, DONE, OFF
from gputui.session.feeds import LiveFeed
from gputui.tui.attach import AttachScreen, make_attach_app
from gputui.tui.attach.capture_panels import CapturePanel
from gputui.tui.attach.header import AttachHeader
from tests.helpers import hookutil
from tests.helpers.deadlines import WAIT_S
from tests.helpers.synthetic import wait_for

pytestmark = pytest.mark.slow  # CPU torch jobs
pytest.importorskip("torch")


@pytest.fixture(scope="module")
def env() -> Iterator[dict[str, str]]:
    with hookutil.isolated_dirs() as dirs, pytest.MonkeyPatch.context() as mp:
        environment = hookutil.make_env(*dirs)
        # The viewer runs in this process: it must look for sockets where the jobs put them.
        mp.setenv("GPUTUI_SOCKET_DIR", environment["GPUTUI_SOCKET_DIR"])
        yield environment


@pytest.fixture
def job(env: dict[str, str], tmp_path: Path) -> Iterator[hookutil.Job]:
    """A job of its own: no capture of the last ten minutes."""
    j = hookutil.start_phase_job(env, tmp_path)
    yield j
    j.stop()


def screen_of(app: Any) -> AttachScreen:
    screen = app.screen
    assert isinstance(screen, AttachScreen)
    return screen


async def test_the_screen_says_it_captures_and_what_it_cost(job: hookutil.Job) -> None:
    feed = LiveFeed(job.pid)
    feed.watch_gpu = False
    app = make_attach_app(feed, auto_capture=False)  # --no-capture
    async with app.run_test(size=(120, 40)) as pilot:
        screen = screen_of(app)
        panel = screen.query_one(CapturePanel)
        # steady, and nothing asked for: it is off, and says how to turn it on
        await wait_for(pilot, lambda: screen.view is not None and screen.view.stats.count >= 30)
        await wait_for(pilot, lambda: "automatic capture off (a: on)" in panel.plain)
        snap = screen.state.snapshot()
        assert screen.auto is not None and screen.auto.state == OFF
        assert snap.capture is None and snap.capture_wanted is None
        await pilot.press("a")
        await wait_for(pilot, lambda: screen.auto is not None and screen.auto.state == DONE)

        def measured() -> bool:
            text = panel.plain
            return "automatic capture with FLOPs: cost the job" in text and "still" not in text

        await wait_for(pilot, measured)
        text = panel.plain
        assert "profiled steps x" in text and "profiler stop" in text
        cap = screen.state.snapshot().capture
        assert cap is not None and cap.auto and cap.options.flops and cap.options.shapes
        assert cap.id == screen.auto.capture_id
        assert screen.view is not None and screen.view.capture_cost is not None
        assert screen.view.capture_cost.profiled_steps == 6
        # the MFU's figures from its FLOPs, without a keypress (a CPU job: no peak)
        header = screen.query_one(AttachHeader)
        await wait_for(pilot, lambda: "FLOP/s" in header.plain)


class HeldFeed(LiveFeed):
    """A live feed whose automatic request waits for the test to let it go:
    the automatic capture is then under way (asked for) for as long as the test
    needs, whatever the machine's pace."""

    def __init__(self, pid: int) -> None:
        super().__init__(pid)
        self.asking = threading.Event()
        self.release = threading.Event()
        self.watch_gpu = False

    def request_capture(
        self, steps: int, flops: bool = False, capture_id: str | None = None, auto: bool = False
    ) -> str:
        if auto:
            self.asking.set()
            self.release.wait(WAIT_S)
        return super().request_capture(steps, flops, capture_id, auto)


async def test_p_waits_for_the_automatic_capture_then_runs(
    env: dict[str, str], job: hookutil.Job
) -> None:
    feed = HeldFeed(job.pid)
    app = make_attach_app(feed)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = screen_of(app)
        auto = screen.auto
        assert auto is not None
        await wait_for(pilot, feed.asking.is_set)
        assert auto.state == ASKED
        await pilot.press("p")
        panel = screen.query_one(CapturePanel)
        await wait_for(pilot, lambda: "your capture (p) waits for it, then runs" in panel.plain)
        # the user's capture was not sent, and not refused: it waits
        assert screen.state.snapshot().capture_wanted is None and auto.user_waits
        feed.release.set()
        auto_id = auto.capture_id

        def both() -> bool:
            cap = screen.state.snapshot().capture
            return cap is not None and cap.id != auto_id and not cap.auto

        await wait_for(pilot, both)
        assert auto.state == DONE and not auto.user_waits
        cap = screen.state.snapshot().capture
        assert cap is not None and cap.options.flops  # p's capture carries FLOPs too
        traces = list((Path(env["XDG_CACHE_HOME"]) / "gputui" / "traces").glob(f"{job.pid}-*"))
        assert len(traces) == 2  # the automatic capture's and the user's
