"""Panels draw their cached lines: what is drawn always matches what was built."""

from __future__ import annotations

from gputui.collectors.replay import ReplaySource
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
