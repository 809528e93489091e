"""What the screens show a user as they draw it: ``q`` goes back from a pushed
screen and quits from the first (the footer and the help say so); swap reads
the same everywhere; the banner and the graphs' title are never cut and do not
move as the replay counts; notices leave the findings line alone; the cluster
screen counts in words; NO_COLOR means no colour at all; ``user:`` with
nothing after it filters nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from rich.segment import Segment
from textual.widgets import Footer
from textual.widgets._footer import FooterKey
from textual.widgets._toast import Toast

from gputui.commands.monitor import DEMO_BANNER
from gputui.recording.replay import ReplaySource
from gputui.reports import monitor as once_report
from gputui.session.process_view import ProcFilter
from gputui.session.rank_feeds import ReplayRanksFeed
from gputui.snapshot.model import HostSnapshot
from gputui.tui.app import make_app
from gputui.tui.attach import AttachScreen, ReplayFeed, make_attach_app
from gputui.tui.attach.findings import JobFindingsPanel
from gputui.tui.attach.rank_screen import RanksApp, RanksScreen
from gputui.tui.screens.help import help_text
from gputui.tui.screens.monitor import MonitorScreen
from gputui.tui.widgets.panels import BannerPanel, FindingsBar, HistoryPanel, HostPanel
from gputui.tui.widgets.processes import ProcessTable
from tests.helpers.screen import drawn, rows_of
from tests.helpers.synthetic import wait_for
from tests.tui.test_tui_ranks import RECORDING


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    import time

    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def demo_monitor(banner: str = DEMO_BANNER) -> Any:
    return make_app(ReplaySource.demo(), 3600.0, banner=banner, autostart=False)


async def footer_line(pilot: Any, app: Any) -> str:
    """The footer as drawn, once it has drawn its keys."""

    def keys_drawn() -> bool:
        footer = app.screen.query_one(Footer)
        shown = [k for k in footer.query(FooterKey) if k.display]
        line = drawn(app)[footer.region.y]
        return bool(shown) and all(f"{k.key_display} {k.description}" in line for k in shown)

    await wait_for(pilot, keys_drawn)
    return drawn(app)[app.screen.query_one(Footer).region.y]


# -- q: back from a pushed screen, quit from the first ----------------------------------------
async def test_q_on_the_attach_screen_over_the_monitor_goes_back() -> None:
    app = demo_monitor()
    async with app.run_test(size=(120, 40)) as pilot:
        app.advance(2)
        await pilot.pause()
        assert " q Quit " in await footer_line(pilot, app)
        await pilot.press("a")  # the demo's hooked job: its recorded attach session
        await wait_for(pilot, lambda: isinstance(app.screen, AttachScreen))
        footer = await footer_line(pilot, app)
        assert " q Back " in footer and "Quit" not in footer
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, MonitorScreen))
        assert app.return_code is None  # still running
        await pilot.press("q")  # the first screen: quits
        await pilot.pause()
        assert app.return_code == 0


async def test_q_on_a_rank_of_the_rank_view_goes_back() -> None:
    app = RanksApp(ReplayRanksFeed.from_file(RECORDING), autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert " q Quit " in await footer_line(pilot, app)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, AttachScreen))
        assert " q Back " in await footer_line(pilot, app)
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, RanksScreen))
        assert app.return_code is None
        await pilot.press("q")
        await pilot.pause()
        assert app.return_code == 0


async def test_q_on_the_attach_apps_own_screen_quits() -> None:
    app = make_attach_app(ReplayFeed.demo(), autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        footer = await footer_line(pilot, app)
        assert " q Quit " in footer and "Back" not in footer
        await pilot.press("escape")  # nothing to go back to: nothing happens
        await pilot.pause()
        assert app.return_code is None
        await pilot.press("q")
        await pilot.pause()
        assert app.return_code == 0


def test_the_help_says_what_q_does() -> None:
    attach = help_text("attach", 200).plain
    assert "q / esc" in attach and "back to the monitor or the rank view" in attach
    assert "q on a sub-screen: back" in help_text("monitor", 200).plain


# -- swap -------------------------------------------------------------------------------------
@pytest.mark.parametrize("swap", [(0, 0), (3 * 2**30, 16 * 2**30)])
def test_swap_reads_the_same_in_every_view(swap: tuple[int, int]) -> None:
    used, total = swap
    host = HostSnapshot(
        hostname="h",
        cpu_count=16,
        cpu_pct=7.0,
        mem_used_bytes=2**31,
        mem_total_bytes=2**37,
        swap_used_bytes=used,
        swap_total_bytes=total,
    )
    said = "0B/0B" if total == 0 else "3.0GiB/16.0GiB"
    panel = HostPanel()
    panel.host = host
    full = "\n".join(line.plain for line in panel.build_lines(44))
    assert "SWAP" in full and said in full
    panel.compact = True
    for width in (100, 120, 160):
        compact = panel.build_lines(width)[0].plain
        assert "SWAP" in compact and "SWP" not in compact and "N/A" not in compact.split("load")[0]
        assert said in compact or (total and "19%" in compact), compact
    snapshot = ReplaySource.demo().sample()
    from dataclasses import replace

    printed = "\n".join(once_report._host(replace(snapshot, host=host), 100))
    assert f"swap {said}" in printed


# -- the banner and the graphs' title -----------------------------------------------------------
NO_DRIVER_BANNER = f"{DEMO_BANNER} (no NVIDIA driver found: libnvidia-ml.so is missing)"


@pytest.mark.parametrize(
    ("size", "banner"), [((80, 24), NO_DRIVER_BANNER), ((120, 40), DEMO_BANNER)]
)
async def test_the_banner_is_whole_and_still_as_the_replay_counts(
    size: tuple[int, int], banner: str
) -> None:
    app = demo_monitor(banner)
    async with app.run_test(size=size) as pilot:
        app.session.source.count()
        seen: dict[int, list[str]] = {}
        done = 0
        for at in (1, 9, 10, 99, 100, 226, 227, 300):
            app.advance(at - done)
            done = at
            await pilot.pause()
            panel = app.screen.query_one(BannerPanel)
            panel.redraw()
            await pilot.pause()
            lines = [line.rstrip() for line in rows_of(app, panel)]
            text = " ".join(" ".join(lines).split())
            status = " ".join(app.replay_status().split())
            assert text.endswith(f"+ a second GPU process {status}"), lines
            assert "…" not in text
            # the words stay on their lines: only the counter moves
            seen[at] = [*lines[:-1], lines[-1].split(" GPU process")[0]]
            assert len(lines[-1]) == size[0] - 1  # the counter ends at the same column
            assert lines[0].startswith(" DEMO: a recording of a real GPU session")
        assert len({tuple(v) for v in seen.values()}) == 1, seen
        assert "pass 2" in app.replay_status()


async def test_the_graphs_title_gives_way_by_whole_parts() -> None:
    app = demo_monitor()
    async with app.run_test(size=(80, 24)) as pilot:
        app.advance(3)
        await pilot.press("g")  # the graphs, which 80x24 leaves out at first
        await wait_for(pilot, lambda: app.screen.query_one(HistoryPanel).display)
        app.advance(300)
        await pilot.pause()
        title = rows_of(app, app.screen.query_one(HistoryPanel))[0].rstrip()
        assert title.strip() == "History: GPU util  last 4:59", title
        for _metric_presses in range(1, 5):  # every metric's title, whole
            await pilot.press("m")
            await pilot.pause()
            title = rows_of(app, app.screen.query_one(HistoryPanel))[0].strip()
            assert "(m:" not in title and "last" in title and "…" not in title, title


# -- notices and the findings line ----------------------------------------------------------
async def test_a_notice_leaves_the_monitors_findings_line_whole() -> None:
    app = demo_monitor()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        app.advance(121)  # a finding is on the line
        await pilot.pause()
        bar = app.screen.query_one(FindingsBar)
        before = rows_of(app, bar)
        assert before[0].strip() != "no findings"
        for key in ("p", "plus", "minus"):
            await pilot.press(key)
            await wait_for(pilot, lambda: bool(list(app.screen.query(Toast))))
            await pilot.pause()
            toast = next(iter(app.screen.query(Toast)))
            assert toast.region.bottom <= bar.region.y, (key, toast.region, bar.region)
            assert rows_of(app, bar) == before
            app.clear_notifications()
            await pilot.pause()


async def test_a_notice_leaves_the_attach_screens_findings_whole() -> None:
    app = make_attach_app(ReplayFeed.demo(), autostart=False)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await pilot.pause()
        app.attach_screen.replay_to(31.5)
        await pilot.pause()
        findings = app.screen.query_one(JobFindingsPanel)
        before = rows_of(app, findings)
        await pilot.press("p")  # a recording: refused, with a notice
        await wait_for(pilot, lambda: bool(list(app.screen.query(Toast))))
        await pilot.pause()
        toast = next(iter(app.screen.query(Toast)))
        assert toast.region.bottom <= findings.region.y, (toast.region, findings.region)
        assert rows_of(app, findings) == before


# -- NO_COLOR ---------------------------------------------------------------------------------
async def test_no_color_sends_no_colour(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = demo_monitor()
    async with app.run_test(size=(100, 30)) as pilot:
        app.advance(121)
        await pilot.pause()
        strips = app.screen._compositor.render_strips()
        segments: list[Segment] = []
        for strip in strips:
            line = list(strip)
            for line_filter in app._filters:
                line = line_filter.apply(line, app.screen.styles.background)
            segments.extend(line)
        coloured = {
            str(s.style)
            for s in segments
            if s.style is not None
            and (
                (s.style.color is not None and not s.style.color.is_default)
                or (s.style.bgcolor is not None and not s.style.bgcolor.is_default)
            )
        }
        assert not coloured, sorted(coloured)[:5]
        # the cursor's row is still marked, by reverse video
        assert any(s.style is not None and s.style.reverse for s in segments)


# -- the filter box ---------------------------------------------------------------------------
@pytest.mark.parametrize("typed", ["user:", "user: ", "gpu:", "type:", "u:"])
def test_a_filter_term_without_its_value_filters_nothing(typed: str) -> None:
    assert not ProcFilter.parse(typed).active
    assert ProcFilter.parse(typed + " python").words == ("python",)


async def test_typing_user_colon_keeps_every_process() -> None:
    app = demo_monitor()
    async with app.run_test(size=(100, 30)) as pilot:
        app.advance(121)
        await pilot.pause()
        table = app.screen.query_one(ProcessTable)
        every = len(table._rows)
        assert every >= 2
        await pilot.press("slash", *"user:")
        await pilot.pause()
        assert len(table._rows) == every
        await pilot.press(*"nobody")  # the control: a user no process has
        await pilot.pause()
        assert len(table._rows) == 0


# -- the cluster screen -----------------------------------------------------------------------
async def test_the_cluster_screen_counts_in_words() -> None:
    from textual.widgets import Static

    from gputui.tui.cluster.screen import ClusterScreen, make_cluster_app
    from tests.unit.test_cluster import FakeSource, snapshot_with

    app = make_cluster_app(FakeSource([snapshot_with("node-a")]), interval_s=60)
    async with app.run_test(size=(120, 30)) as pilot:
        screen = app.screen
        assert isinstance(screen, ClusterScreen)
        await wait_for(pilot, lambda: screen.refreshes >= 1)
        status = str(screen.query_one("#cl-status", Static).render())
        assert status.startswith("1 node, 1 GPU, 0 jobs"), status
