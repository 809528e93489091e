"""Pinned screens (pytest-textual-snapshot).  Update only after looking at them:
``pytest tests/test_tui_snapshots.py --snapshot-update`` then open the report."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from gputui.tui.app import GputuiApp, make_app
from gputui.tui.screens.detail import ProcessDetailScreen
from gputui.tui.widgets.processes import ProcessTable
from tests.helpers.synthetic import make_snapshots, replay_source, wait_for

BANNER = "SYNTHETIC DATA - generated for tests, not this machine"


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Times on screen come from the snapshots; the time zone must be fixed too.
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def app(**kw: Any) -> GputuiApp:
    source = replay_source(make_snapshots(n_gpus=4, n_procs=8, n_steps=40, seed=1))
    # No sampler thread: the test plays every snapshot itself, so the screen is exact.
    return make_app(source, interval_s=1.0, banner=BANNER, autostart=False, **kw)


async def fill(pilot: Any) -> None:
    the_app: GputuiApp = pilot.app
    the_app.advance(40)
    await pilot.pause()


def test_main_screen_120x40(snap_compare: Any) -> None:
    assert snap_compare(app(), terminal_size=(120, 40), run_before=fill)


def test_main_screen_80x24(snap_compare: Any) -> None:
    assert snap_compare(app(), terminal_size=(80, 24), run_before=fill)


def test_main_screen_ascii_compact(snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await fill(pilot)
        await pilot.press("t")

    assert snap_compare(app(ascii_only=True), terminal_size=(100, 30), run_before=run_before)


def test_process_detail_screen(snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await fill(pilot)
        pilot.app.screen.query_one(ProcessTable).move_cursor(2)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ProcessDetailScreen))
        await pilot.pause()

    assert snap_compare(app(), terminal_size=(100, 34), run_before=run_before)


def test_help_screen(snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await fill(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(app(), terminal_size=(100, 50), run_before=run_before)


# -- the embedded demo (a real H100 session) at 80x24: nothing cut ----------------------------
#: both GPU processes running, the power cap finding on
DEMO_AT = 121


def demo_app() -> GputuiApp:
    from gputui.commands.monitor import DEMO_BANNER
    from gputui.recording.replay import ReplaySource

    return make_app(ReplaySource.demo(), 3600.0, banner=DEMO_BANNER, autostart=False)


def demo_then(*keys: str) -> Any:
    async def run_before(pilot: Any) -> None:
        pilot.app.advance(DEMO_AT)
        await pilot.pause()
        for key in keys:
            await pilot.press(key)
        await pilot.pause()

    return run_before


def test_demo_80x24(snap_compare: Any) -> None:
    assert snap_compare(demo_app(), terminal_size=(80, 24), run_before=demo_then())


def test_demo_help_80x24(snap_compare: Any) -> None:
    run_before = demo_then("question_mark")
    assert snap_compare(demo_app(), terminal_size=(80, 24), run_before=run_before)


def test_demo_findings_80x24(snap_compare: Any) -> None:
    assert snap_compare(demo_app(), terminal_size=(80, 24), run_before=demo_then("f"))
