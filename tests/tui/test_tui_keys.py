"""Keys every app shares: Ctrl-C quits (as in htop and nvitop) from any screen,
and ``?`` shows the keys of the screen on top, the quit keys among them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from textual.app import App
from textual.binding import Binding
from textual.widgets import Input

from gputui.session.rank_feeds import ReplayRanksFeed
from gputui.tui.app import make_app
from gputui.tui.attach import AttachScreen, ReplayFeed, make_attach_app
from gputui.tui.attach.findings import JobFindingsScreen
from gputui.tui.attach.memory_snapshot import MemorySnapshotScreen
from gputui.tui.attach.rank_screen import RanksApp, RanksScreen
from gputui.tui.attach.rank_table import RankTable
from gputui.tui.attach.roofline_view import RooflineScreen
from gputui.tui.attach.table import CaptureTable
from gputui.tui.base import BaseApp
from gputui.tui.cluster.keyed_table import KeyedTable
from gputui.tui.cluster.screen import ClusterScreen, make_cluster_app
from gputui.tui.screens.detail import ProcessDetailScreen
from gputui.tui.screens.dialogs import SignalDialog
from gputui.tui.screens.findings import FindingsScreen
from gputui.tui.screens.help import HelpPanel, HelpScreen, help_text
from gputui.tui.screens.monitor import MonitorScreen
from gputui.tui.widgets.processes import ProcessTable
from tests.helpers.synthetic import live_like_source, make_snapshots, replay_source, wait_for
from tests.tui.test_tui_ranks import RECORDING
from tests.unit.test_cluster import FakeSource, snapshot_with

SNAPSHOTS = make_snapshots(n_gpus=2, n_procs=4, n_steps=10, seed=3)


def monitor(**kw: Any) -> Any:
    source = kw.pop("source", None) or replay_source(SNAPSHOTS)
    return make_app(source, 3600.0, autostart=False, **kw)


def attach() -> Any:
    return make_attach_app(ReplayFeed.demo(), autostart=False)


def ranks() -> Any:
    return RanksApp(ReplayRanksFeed.from_file(RECORDING), autostart=False)


def cluster() -> Any:
    return make_cluster_app(FakeSource([snapshot_with("node-a")]), interval_s=60, autostart=False)


Setup = Callable[[Any], Awaitable[None]]


async def on_top(pilot: Any) -> None:
    await pilot.pause()


def pressing(*keys: str, then: type | None = None) -> Setup:
    async def setup(pilot: Any) -> None:
        await pilot.pause()
        if isinstance(pilot.app.screen, AttachScreen):
            pilot.app.screen.replay_to(10.0)
        for key in keys:
            await pilot.press(key)
        if then is not None:
            await wait_for(pilot, lambda: isinstance(pilot.app.screen, then))
        await pilot.pause()

    return setup


async def filter_focused(pilot: Any) -> None:
    pilot.app.advance(2)
    await pilot.press("slash", "x")  # the filter box has the focus, nothing selected
    assert isinstance(pilot.app.focused, Input)


async def signal_dialog(pilot: Any) -> None:
    await pilot.pause()
    pilot.app.advance(2)
    await pilot.pause()
    await pilot.press("k")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, SignalDialog))


@pytest.mark.parametrize(
    ("make", "setup"),
    [
        (monitor, on_top),
        (monitor, pressing("question_mark", then=HelpScreen)),
        (monitor, pressing("f", then=FindingsScreen)),
        (monitor, filter_focused),
        (lambda: monitor(source=live_like_source(SNAPSHOTS)), signal_dialog),
        (attach, on_top),
        (attach, pressing("m", then=MemorySnapshotScreen)),
        (attach, pressing("f", then=JobFindingsScreen)),
        (ranks, on_top),
        (ranks, pressing("enter", then=AttachScreen)),
        (cluster, on_top),
    ],
    ids=[
        "monitor",
        "monitor-help",
        "monitor-findings",
        "monitor-filter",
        "monitor-signal-dialog",
        "attach",
        "attach-memory",
        "attach-findings",
        "ranks",
        "ranks-rank",
        "cluster",
    ],
)
async def test_ctrl_c_quits_every_app_from_any_screen(
    make: Callable[[], App[None]], setup: Setup
) -> None:
    app = make()
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        await setup(pilot)
        await pilot.press("ctrl+c")
        await pilot.pause()
        # quit, not "Do you want to quit? Press ctrl+q"
        assert app.return_code == 0
        assert not app._notifications


@pytest.mark.parametrize(
    ("make", "setup", "topic"),
    [
        (monitor, on_top, "monitor"),
        (monitor, pressing("f", then=FindingsScreen), "monitor"),
        (attach, on_top, "attach"),
        (attach, pressing("l", then=RooflineScreen), "attach"),
        (ranks, on_top, "ranks"),
        (ranks, pressing("enter", then=AttachScreen), "attach"),
        (cluster, on_top, "cluster"),
    ],
    ids=["monitor", "monitor-findings", "attach", "attach-roofline", "ranks", "rank", "cluster"],
)
async def test_help_shows_the_keys_of_the_screen_on_top(
    make: Callable[[], App[None]], setup: Setup, topic: str
) -> None:
    app = make()
    async with app.run_test(size=(100, 40)) as pilot:
        await setup(pilot)
        below = app.screen
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.pause()
        help_screen = app.screen
        assert isinstance(help_screen, HelpScreen) and help_screen.topic == topic
        text = help_screen.query_one(HelpPanel).plain
        # the quit keys, said
        assert "q / ctrl+c" in text and "quit" in text
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: app.screen is below)


#: key name -> how the help writes it
SPELLED = {
    "question_mark": "?",
    "slash": "/",
    "escape": "esc",
    "pageup": "pgup",
    "pagedown": "pgdn",
    "plus": "+",
    "minus": "-",
    "f1": "F1",
}
#: aliases the help does not name (another key of the same binding is named)
UNNAMED = {"equals_sign", "super+c"}


def binding_keys(*classes: type) -> set[str]:
    keys: set[str] = set()
    for cls in classes:
        for node in cls.__mro__:
            if not node.__module__.startswith("gputui."):
                continue  # Textual's own keys (a table's left / right)
            for binding in node.__dict__.get("BINDINGS", []):
                if isinstance(binding, Binding):
                    keys.update(k.strip() for k in binding.key.split(","))
    return {SPELLED.get(k, k) for k in keys} - UNNAMED - {"tab", "shift+tab", "ctrl+q"}


@pytest.mark.parametrize(
    ("topic", "classes"),
    [
        (
            "monitor",
            (BaseApp, MonitorScreen, ProcessTable, ProcessDetailScreen, SignalDialog, HelpScreen),
        ),
        ("attach", (BaseApp, AttachScreen, CaptureTable, MemorySnapshotScreen, RooflineScreen)),
        ("ranks", (BaseApp, RanksScreen, RankTable, AttachScreen, MemorySnapshotScreen)),
        ("cluster", (BaseApp, ClusterScreen, KeyedTable)),
    ],
)
def test_help_names_every_key_of_its_screens(topic: str, classes: tuple[type, ...]) -> None:
    text = help_text(topic).plain
    # a key is named at the start of its row ("  s / S  ...") or among others
    named = set()
    for line in text.splitlines():
        if line.startswith("  ") and not line.startswith("   "):
            column = line[2:].split("  ")[0]
            named.update(part.strip() for part in column.split(" / "))
        named.update(word.strip(",;:()") for word in line.split())
    missing = binding_keys(*classes) - named
    assert not missing, f"{topic}: {sorted(missing)}"
