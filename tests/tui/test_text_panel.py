"""Panels draw their cached lines: what is drawn always matches what was built."""

from __future__ import annotations

from gputui.recording.replay import ReplaySource
from gputui.tui.app import make_app
from gputui.tui.widgets.panels import FindingsBar


async def test_findings_bar_draws_the_finding_it_holds() -> None:
    # Regression: data fed before the first layout left a stale blank line drawn
    # under a finding that the panel's text already held.
    source = ReplaySource.demo()
    app = make_app(source, 1.0, banner="test", autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        app.advance(121)  # the demo's power-capped stretch: one "clocks throttled" finding
        await pilot.pause()
        bar = app.screen.query_one(FindingsBar)
        assert "clocks throttled" in bar.plain
        assert "clocks throttled" in bar.render_line(0).text
        assert "clocks&#160;throttled" in app.export_screenshot()


async def test_a_changed_first_line_is_repainted_under_a_border() -> None:
    """Regression: with a border or padding the repaint of a changed line landed
    one row lower (the gutter was added twice), so a panel's first line never
    repainted on a real terminal: the capture panel kept "0s ago" for minutes."""
    from rich.text import Text
    from textual.app import App, ComposeResult

    from gputui.tui.widgets.text_panel import TextPanel

    class Panel(TextPanel):
        DEFAULT_CSS = "Panel { border-top: solid red; padding: 0 1; }"
        first = "first 0"

        def build(self, width: int) -> Text:
            return Text(f"{self.first}\nsecond\nthird")

    class Host(App[None]):
        def compose(self) -> ComposeResult:
            yield Panel()

    app = Host()
    async with app.run_test(size=(40, 10)) as pilot:
        panel = app.query_one(Panel)
        panel.redraw()
        await pilot.pause()
        panel._repaint_regions.clear()
        panel.first = "first 1"
        panel.redraw()
        # the first content row sits under the one-row border
        rows = {(r.y, r.height) for r in panel._repaint_regions}
        assert rows == {(1, 1)}, panel._repaint_regions
        await pilot.pause()
        assert "first 1" in app.export_screenshot().replace("&#160;", " ")


async def test_lines_a_panel_makes_draw_as_its_joined_text_would() -> None:
    """A panel that makes its lines (``build_lines``) draws the very strips of the
    same text built whole and split, repaints only the lines that changed, and
    still says what it shows (``plain``)."""
    from rich.text import Text
    from textual.app import App, ComposeResult

    from gputui.tui.widgets.text_panel import TextPanel

    def lines(second: str) -> list[Text]:
        head = Text.assemble(("GPU0 ", "bold"), ("▇▇▅", "magenta"), " 97%")
        return [head, Text(second, style="dim"), Text("load 1.0")]

    class Whole(TextPanel):
        DEFAULT_CSS = "Whole { border-top: solid red; padding: 0 1; }"
        second = "idle"

        def build(self, width: int) -> Text:
            return Text("\n").join(lines(self.second))

    class Made(Whole):
        def build_lines(self, width: int) -> list[Text]:
            return lines(self.second)

    class Host(App[None]):
        def compose(self) -> ComposeResult:
            yield Whole()
            yield Made()

    app = Host()
    async with app.run_test(size=(40, 12)) as pilot:
        whole, made = app.query_one(Whole), app.query_one(Made)
        for second in ("idle", "busy 2", "busy 3"):
            for panel in (whole, made):
                panel.second = second
                panel._repaint_regions.clear()
                panel.redraw()
            repainted = {(r.y, r.height) for r in made._repaint_regions}
            if second != "idle":  # only the second line changed (under the border)
                assert repainted == {(2, 1)}
            await pilot.pause()
            assert made.plain == whole.plain and second in made.plain
            for y in range(3):
                assert list(made.render_line(y)) == list(whole.render_line(y))
        made._repaint_regions.clear()
        made.redraw()  # nothing changed: nothing repainted
        assert not made._repaint_regions
