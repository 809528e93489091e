"""The panels' and the process table's own drawing of their lines (no styles
cache) must give what Textual's drawing of the same widget gives, in every state
the monitor reaches and after the styles under it change; a widget with a box
keeps Textual's path."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.text import Span, Text
from textual.app import App, ComposeResult
from textual.filter import Monochrome
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from gputui.recording.replay import ReplaySource
from gputui.tui.app import make_app
from gputui.tui.widgets.processes import ProcessTable
from gputui.tui.widgets.text_panel import RECENT_LINES, TextPanel, text_segments
from tests.helpers.synthetic import make_snapshots, replay_source


def _textual(panel: TextPanel, crop: Region) -> list[Strip]:
    panel._styles_cache.clear()
    return Widget.render_lines(panel, crop)


def _crops(panel: TextPanel) -> list[Region]:
    width, height = panel.region.size
    crops = [Region(0, 0, width, height)]
    if height > 1:
        crops.append(Region(0, height - 1, width, 1))
    if width > 4:
        crops.append(Region(2, 0, width - 4, min(height, 2)))  # a cut across the line
    return crops


def _check_all(screen: Widget) -> int:
    checked = 0
    for panel in screen.query(TextPanel):
        if not panel.region.area:
            continue
        for crop in _crops(panel):
            ours = panel.render_lines(crop)
            assert ours == _textual(panel, crop), f"{type(panel).__name__} {crop}"
            checked += 1
    return checked


async def test_the_monitors_panels_draw_what_textual_draws() -> None:
    app = make_app(ReplaySource.demo(), interval_s=3600.0, autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        checked = 0
        for keys in ((), ("m",), ("m", "m"), ("g",), ("g",)):
            for key in keys:
                await pilot.press(key)
            app.advance()
            await pilot.pause()
            checked += _check_all(app.screen)
        assert checked > 20
        # the styles under the panels change: the theme, then a background set on
        # the screen itself (an inline style, not the stylesheet)
        app.theme = "textual-light" if app.theme != "textual-light" else "nord"
        await pilot.pause()
        _check_all(app.screen)
        app.screen.styles.background = "darkred"
        await pilot.pause()
        _check_all(app.screen)
        # NO_COLOR's filter on top of the app's own (each line passes through all)
        app._filters.append(Monochrome())
        app.screen.refresh()
        await pilot.pause()
        _check_all(app.screen)
        _check_table(app.screen.query_one(ProcessTable))
        # the control: the fast path ran, also for the panels with side padding
        drew = {type(p).__name__ for p in app.screen.query(TextPanel) if p._drew_plain}
        assert {"HeaderPanel", "DevicePanel", "HostPanel", "HistoryPanel"} <= drew


class _Boxed(TextPanel):
    DEFAULT_CSS = "_Boxed { border: round red; padding: 0 1; }"

    def build(self, width: int) -> Text:
        return Text("a boxed line\nand another", style="bold")


class _BoxApp(App[None]):
    def compose(self) -> ComposeResult:
        yield _Boxed()


async def test_a_panel_with_a_box_keeps_textuals_drawing() -> None:
    app = _BoxApp()
    async with app.run_test(size=(40, 8)) as pilot:
        panel = app.query_one(_Boxed)
        panel.redraw()
        await pilot.pause()
        crop = Region(0, 0, *panel.region.size)
        assert panel.render_lines(crop) == _textual(panel, crop)
        assert not panel._drew_plain
        # the same panel without its border (its side padding kept, then none) takes
        # the fast path, and still agrees
        panel.styles.border = ("none", "red")
        for padding in ((0, 1), (0, 0, 0, 3), 0):
            panel.styles.padding = padding
            await pilot.pause()
            crop = Region(0, 0, *panel.region.size)
            assert panel.render_lines(crop) == _textual(panel, crop)
            assert panel._drew_plain
        # padding above: Textual's drawing
        panel.styles.padding = (1, 0, 0, 0)
        await pilot.pause()
        crop = Region(0, 0, *panel.region.size)
        assert panel.render_lines(crop) == _textual(panel, crop)
        assert not panel._drew_plain
        # and with the box back, Textual's drawing again (its cache started afresh)
        panel.styles.padding = (0, 1)
        panel.render_lines(crop)
        panel.styles.border = ("round", "red")
        await pilot.pause()
        crop = Region(0, 0, *panel.region.size)
        assert panel.render_lines(crop) == _textual(panel, crop)
        assert not panel._drew_plain


_STYLES = ["", "bold", "dim", "cyan", "bold red", "on blue", "not-a-style", "magenta underline"]


@st.composite
def _texts(draw: st.DrawFn) -> Text:
    plain = draw(st.text(alphabet="ab █▏中\u0301x", max_size=30))
    text = Text(plain, style=draw(st.sampled_from(["", "", "", "bold"])))
    size = len(plain)
    if size and draw(st.booleans()):
        text.spans.append(Span(0, size, draw(st.sampled_from(_STYLES))))  # a line's own style
    if draw(st.booleans()):
        # spans one after another (the common case)
        at = 0
        for _ in range(draw(st.integers(0, 5))):
            start = draw(st.integers(at, size))
            end = draw(st.integers(start, size))
            text.spans.append(Span(start, end, draw(st.sampled_from(_STYLES))))
            at = end
    else:
        # overlapping, out of order (each a span Rich can render: inside the text)
        for _ in range(draw(st.integers(0, 4))):
            start = draw(st.integers(0, size))
            end = draw(st.integers(start, size))
            text.spans.append(Span(start, end, draw(st.sampled_from(_STYLES))))
    return text


@settings(max_examples=400, deadline=None)
@given(_texts())
def test_a_lines_segments_are_richs(text: Text) -> None:
    console = Console(width=80)
    assert text_segments(text, console) == list(text.render(console))


def _check_table(table: ProcessTable) -> None:
    width, height = table.region.size
    for crop in (
        Region(0, 0, width, height),
        Region(0, 1, width, 2),
        Region(3, 0, width - 6, 3),
        Region(0, height - 1, width, 1),
    ):
        ours = table.render_lines(crop)
        assert table._drew_plain
        assert ours == _textual(table, crop), f"{crop}"


async def test_the_process_tables_lines_are_what_textual_draws() -> None:
    # 60 processes on 4 GPUs: more rows than the table shows, so a scrollbar beside it
    source = replay_source(make_snapshots(n_gpus=4, n_procs=60, n_steps=4, seed=3))
    app = make_app(source, interval_s=3600.0, autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        app.advance()
        await pilot.pause()
        table = app.screen.query_one(ProcessTable)
        assert table.max_scroll_y > 0  # the control: the rows overflow the table
        _check_table(table)
        for key in ("down", "down", "pagedown", "s", "t", "end"):
            await pilot.press(key)
            if key == "s":
                app.advance()  # new values under a new order
            await pilot.pause()
            _check_table(table)
        table.blur()
        await pilot.pause()
        _check_table(table)
        app.theme = "textual-light" if app.theme != "textual-light" else "nord"
        await pilot.pause()
        _check_table(table)
        # a table with a box draws through Textual's cache
        table.styles.padding = (0, 1)
        await pilot.pause()
        crop = Region(0, 0, *table.region.size)
        assert table.render_lines(crop) == _textual(table, crop)
        assert not table._drew_plain


class _Gauge(TextPanel):
    """A line that goes back and forth between a few states, as a gauge does."""

    def __init__(self) -> None:
        super().__init__()
        self.value = 0
        self.colour = "green"

    def build_lines(self, width: int) -> list[Text]:
        line = Text("UTIL ", style="bold")
        line.append("█" * self.value, style=self.colour)
        line.append(f" {self.value}%")
        return [Text("title"), line]


class _GaugeApp(App[None]):
    def compose(self) -> ComposeResult:
        yield _Gauge()


async def test_a_line_drawn_a_moment_ago_is_drawn_from_its_strip() -> None:
    app = _GaugeApp()
    async with app.run_test(size=(40, 4)) as pilot:
        panel = app.query_one(_Gauge)
        whole = Region(0, 0, 40, 2)

        async def draw(value: int) -> list[Strip]:
            panel.value = value
            panel.redraw()
            await pilot.pause()
            ours = panel.render_lines(whole)
            assert ours == _textual(panel, whole)  # the control: Textual's drawing
            return ours

        first = await draw(3)
        second = await draw(4)
        assert second[1] is not first[1] and second[0] is first[0]
        again = await draw(3)
        assert again[1] is first[1]  # the same text, spans and style: the same strip
        panel.colour = "red"  # the same text in another colour: another strip
        red = await draw(3)
        assert red[1] is not first[1] and red[1].text == first[1].text
        panel.colour = "green"
        # what else the line is drawn with changes (the theme): drawn afresh
        app.theme = "textual-light" if app.theme != "textual-light" else "nord"
        await pilot.pause()
        themed = await draw(4)
        assert themed[1] is not second[1]
        # the oldest strips go past the limit
        for value in range(5, 5 + RECENT_LINES + 1):
            await draw(value % 30)
        assert len(panel._recent[1]) <= RECENT_LINES
