"""Every screen at 80x24 as drawn: no word cut ("…") in the header, banner,
footer, help, findings or notices, and every key of the footer whole on screen."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

from gputui.commands.attach import DEMO_BANNER as ATTACH_BANNER
from gputui.commands.monitor import DEMO_BANNER
from gputui.recording.replay import ReplaySource
from gputui.session.rank_feeds import ReplayRanksFeed
from gputui.tui.app import make_app
from gputui.tui.attach import AttachScreen, ReplayFeed, make_attach_app
from gputui.tui.attach.findings import JobFindingsScreen
from gputui.tui.attach.header import AttachHeader
from gputui.tui.attach.memory_panel import MemoryPanel
from gputui.tui.attach.memory_snapshot import MemorySnapshotScreen
from gputui.tui.attach.rank_screen import RanksApp, RanksScreen
from gputui.tui.attach.roofline_view import RooflineScreen
from gputui.tui.attach.step_bars import StepBars
from gputui.tui.screens.findings import FindingsScreen
from gputui.tui.screens.help import HelpScreen
from gputui.tui.widgets.panels import BannerPanel, FindingsBar, HeaderPanel
from tests.helpers.screen import drawn, notices, rows_of
from tests.helpers.synthetic import wait_for
from tests.tui.test_tui_ranks import AT_S, BANNER, RECORDING

SIZE = (80, 24)
#: the demo monitor at this snapshot: both processes, a finding
DEMO_AT = 121
#: the attach demo just after its capture
ATTACH_AT_S = 31.5


async def footer_whole(pilot: Any, app: Any) -> None:
    """Every key the footer shows lies inside the screen (none cut at its edge).
    The footer composes its keys after the screen: wait until it has drawn them."""

    def keys_drawn() -> bool:
        footer = app.screen.query_one(Footer)
        shown = [k for k in footer.query(FooterKey) if k.display]
        line = drawn(app)[footer.region.y]
        return bool(shown) and all(f"{k.key_display} {k.description}" in line for k in shown)

    await wait_for(pilot, keys_drawn)
    footer = app.screen.query_one(Footer)
    keys = list(footer.query(FooterKey))
    assert keys
    for key in keys:
        if key.display:
            assert key.region.right <= app.size.width, (key.key, key.description, key.region)
    line = drawn(app)[footer.region.y]
    for key in keys:
        if key.display:
            assert f"{key.key_display} {key.description}" in line, line


def no_cut(lines: list[str], where: str) -> None:
    cut = [line for line in lines if "…" in line]
    assert not cut, f"{where}: {cut}"


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    import time

    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def monitor(ascii_only: bool = False, banner: str = DEMO_BANNER) -> Any:
    return make_app(
        ReplaySource.demo(), 3600.0, ascii_only=ascii_only, banner=banner, autostart=False
    )


async def test_monitor_screens_cut_no_word_at_80_columns() -> None:
    app = monitor()
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        app.advance(DEMO_AT)
        await pilot.pause()
        screen = app.screen
        no_cut(
            rows_of(
                app,
                screen.query_one(HeaderPanel),
                screen.query_one(BannerPanel),
                screen.query_one(FindingsBar),
            ),
            "monitor",
        )
        assert "every 3600s" in rows_of(app, screen.query_one(HeaderPanel))[0]
        await footer_whole(pilot, app)
        await pilot.press("k")  # a recording: refused, with a notice
        await wait_for(pilot, lambda: bool(notices(app)))
        no_cut(notices(app), "notice")
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.pause()
        no_cut(drawn(app), "help")
        await footer_whole(pilot, app)
        await pilot.press("escape", "f")
        await wait_for(pilot, lambda: isinstance(app.screen, FindingsScreen))
        await pilot.pause()
        no_cut(drawn(app), "findings")
        await footer_whole(pilot, app)


async def test_the_no_driver_banner_breaks_between_words() -> None:
    reason = "no NVIDIA driver found: libnvidia-ml.so is missing"
    app = monitor(banner=f"{DEMO_BANNER} ({reason})")
    async with app.run_test(size=SIZE) as pilot:
        app.advance(3)
        await pilot.pause()
        banner = app.screen.query_one(BannerPanel)
        lines = rows_of(app, banner)
        no_cut(lines, "banner")
        said = " ".join(" ".join(lines).replace(" 3/? ", " ").split())
        assert reason in said and "not this machine" in said


async def test_attach_screens_cut_no_word_at_80_columns() -> None:
    app = make_attach_app(ReplayFeed.demo(), banner=ATTACH_BANNER, autostart=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.pause()
        app.attach_screen.replay_to(ATTACH_AT_S)
        await pilot.pause()
        screen = app.screen
        header = rows_of(app, screen.query_one(AttachHeader))
        no_cut(header[1:], "attach header")  # the first line cuts the job's command
        assert header[0].rstrip().endswith("2026-11-22 14:10:14")
        no_cut(rows_of(app, screen.query_one(BannerPanel)), "banner")
        no_cut(rows_of(app, screen.query_one("#att-findings")), "findings")
        no_cut(rows_of(app, screen.query_one(StepBars), screen.query_one(MemoryPanel)), "steps")
        await footer_whole(pilot, app)
        for key in ("p", "m", "l", "f", "q"):  # the keys the footer cut before
            assert f" {key} " in drawn(app)[-1]
        await pilot.press("p")  # a recording: refused, with a notice
        await wait_for(pilot, lambda: bool(notices(app)))
        no_cut(notices(app), "notice")
        for key, kind in (
            ("question_mark", HelpScreen),
            ("f", JobFindingsScreen),
            ("m", MemorySnapshotScreen),
            ("l", RooflineScreen),
        ):
            await pilot.press(key)
            await wait_for(pilot, lambda kind=kind: isinstance(app.screen, kind))
            await pilot.pause()
            no_cut(drawn(app), kind.__name__)
            await footer_whole(pilot, app)
            await pilot.press("escape")
            await wait_for(pilot, lambda: isinstance(app.screen, AttachScreen))


async def test_rank_view_and_a_cpu_rank_cut_no_word_at_80_columns() -> None:
    app = RanksApp(ReplayRanksFeed.from_file(RECORDING), autostart=False, banner=BANNER)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        ranks = app.screen
        assert isinstance(ranks, RanksScreen)
        ranks.replay_to(AT_S)
        await pilot.pause()
        header = rows_of(app, ranks.query_one("#ranks-header"))
        # the job's command line is cut: the rest wraps
        no_cut([line for line in header if "train_ddp_cpu.py" not in line], "ranks header")
        no_cut(rows_of(app, ranks.query_one("#ranks-findings")), "findings")
        await footer_whole(pilot, app)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, AttachScreen))
        rank = app.screen
        assert isinstance(rank, AttachScreen)
        rank.refresh_view(force=True)
        await pilot.pause()
        steps = rows_of(app, rank.query_one(StepBars), rank.query_one(MemoryPanel))
        no_cut(steps, "steps")
        assert any("no outliers (" in line and ")" in line for line in steps)
        await footer_whole(pilot, app)
        # m and l on a CPU job: what applies to it, whole
        for key, kind in (("m", MemorySnapshotScreen), ("l", RooflineScreen)):
            await pilot.press(key)
            await wait_for(pilot, lambda kind=kind: isinstance(app.screen, kind))
            await pilot.pause()
            lines = drawn(app)
            no_cut(lines, kind.__name__)
            assert max(len(line.rstrip()) for line in lines) <= 80
            text = " ".join(" ".join(lines).split())
            assert "CPU job" in text and "bench" not in text
            await pilot.press("escape")
            await wait_for(pilot, lambda: isinstance(app.screen, AttachScreen))


async def test_a_wide_attach_footer_shows_every_key() -> None:
    app = make_attach_app(ReplayFeed.demo(), autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app.attach_screen.replay_to(ATTACH_AT_S)
        await pilot.pause()
        await footer_whole(pilot, app)
        line = drawn(app)[-1]
        for key in ("p Capture", "g Wall/GPU", "o Kernels/ops", "r Reconnect", "l Roofline"):
            assert key in line, line
        await pilot.press("g")  # the footer's g: the same action
        assert app.attach_screen.gpu_mode
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        await footer_whole(pilot, app)
        assert "g Wall/GPU" not in drawn(app)[-1]
        await pilot.press("g")  # the hidden g still works
        assert not app.attach_screen.gpu_mode
