"""The process table keeps its styles between refreshes; a theme, a class or the
focus changing must still reach every row it draws."""

from __future__ import annotations

from gputui.recording.replay import ReplaySource
from gputui.tui.app import make_app
from gputui.tui.widgets.processes import ProcessTable

NAMES = ("", "processtable--header", "processtable--cursor", "processtable--cursor-blurred")


def _fresh(table: ProcessTable, name: str) -> object:
    table._rich_style_cache.clear()  # Textual's own, worked out again
    return table.get_component_rich_style(name) if name else table.rich_style


async def test_the_tables_styles_follow_the_theme_and_the_focus() -> None:
    app = make_app(ReplaySource.demo(), interval_s=3600.0, autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        app.advance()
        await pilot.pause()
        table = app.screen.query_one(ProcessTable)
        for name in NAMES:
            table._style(name)
        before = {name: table._style(name) for name in NAMES}
        drawn = table.render_line(1)  # the cursor's row

        app.theme = "textual-light" if app.theme != "textual-light" else "nord"
        await pilot.pause()
        after = {name: table._style(name) for name in NAMES}
        assert after == {name: _fresh(table, name) for name in NAMES}
        assert after[""] != before[""]  # the control: the theme did change them
        assert table.render_line(1) != drawn

        table.blur()
        await pilot.pause()
        assert not table.has_focus
        blurred = table.render_line(1)
        cursor = table._style("processtable--cursor-blurred")
        assert cursor == _fresh(table, "processtable--cursor-blurred")
        assert any(segment.style and cursor.bgcolor == segment.style.bgcolor for segment in blurred)
