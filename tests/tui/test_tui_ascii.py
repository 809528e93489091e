"""--ascii: nothing but ASCII anywhere on screen, in every app and sub-screen,
notices included (Textual's own frames and what the panels quote: "74°C")."""

from __future__ import annotations

from typing import Any

from gputui.recording.replay import ReplaySource
from gputui.session.rank_feeds import ReplayRanksFeed
from gputui.tui.app import make_app
from gputui.tui.attach import ReplayFeed, make_attach_app
from gputui.tui.attach.findings import JobFindingsScreen
from gputui.tui.attach.memory_snapshot import MemorySnapshotScreen
from gputui.tui.attach.python_view import PythonScreen
from gputui.tui.attach.rank_screen import RanksApp
from gputui.tui.attach.roofline_view import RooflineScreen
from gputui.tui.screens.findings import FindingsScreen
from gputui.tui.screens.help import HelpScreen
from tests.helpers.screen import drawn, notices
from tests.helpers.synthetic import wait_for
from tests.tui.test_tui_ranks import AT_S, RECORDING

SIZE = (80, 24)
#: the demo monitor with both processes and a finding; the attach demo after its capture
DEMO_AT = 121
ATTACH_AT_S = 31.5


def monitor() -> Any:
    return make_app(ReplaySource.demo(), 3600.0, ascii_only=True, autostart=False)


async def test_ascii_screens_are_ascii_everywhere() -> None:
    """--ascii: the monitor, attach and rank screens, their sub-screens and notices."""

    def ascii_only(where: str) -> None:
        text = "\n".join(drawn(app))
        bad = sorted({c for c in text if not c.isascii()})
        assert not bad, f"{where}: {bad}"

    app: Any = monitor()
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        app.advance(DEMO_AT)
        await pilot.pause()
        ascii_only("monitor")
        await pilot.press("k")
        await wait_for(pilot, lambda: bool(notices(app)))
        ascii_only("monitor notice")
        for key, kind in (("question_mark", HelpScreen), ("f", FindingsScreen)):
            await pilot.press(key)
            await wait_for(pilot, lambda kind=kind: isinstance(app.screen, kind))
            await pilot.pause()
            ascii_only(kind.__name__)  # the findings quote "74°C"
            await pilot.press("escape")
    app = make_attach_app(ReplayFeed.demo(), ascii_only=True, autostart=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.pause()
        app.attach_screen.replay_to(ATTACH_AT_S)
        await pilot.pause()
        await pilot.press("p")
        await wait_for(pilot, lambda: bool(notices(app)))
        ascii_only("attach notice")
        for key, kind in (
            ("question_mark", HelpScreen),
            ("f", JobFindingsScreen),
            ("m", MemorySnapshotScreen),
            ("l", RooflineScreen),
            ("y", PythonScreen),
        ):
            await pilot.press(key)
            await wait_for(pilot, lambda kind=kind: isinstance(app.screen, kind))
            await pilot.pause()
            ascii_only(kind.__name__)  # the findings list's frame and "·"
            await pilot.press("escape")
    app = RanksApp(ReplayRanksFeed.from_file(RECORDING), autostart=False, ascii_only=True)
    async with app.run_test(size=SIZE) as pilot:
        app.ranks_screen.replay_to(AT_S)
        await pilot.pause()
        ascii_only("rank view")  # the footer's enter key
        await pilot.press("f")
        await wait_for(pilot, lambda: isinstance(app.screen, JobFindingsScreen))
        await pilot.pause()
        ascii_only("rank findings")
