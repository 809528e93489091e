"""All current findings, each with its evidence and the usual fix."""

from __future__ import annotations

from typing import cast

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Footer

from gputui.analysis.finding import Finding
from gputui.reports import findings as findings_text
from gputui.tui.monitor_host import MonitorHost
from gputui.tui.render import hanging
from gputui.tui.widgets.panels import BannerPanel
from gputui.tui.widgets.text_panel import TextPanel


class FindingsPanel(TextPanel):
    """Every finding with its evidence, what it costs, the fix, how to confirm it
    and where the rule comes from."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.items: list[Finding] = []

    def build(self, width: int) -> Text:
        items = self.items
        text = Text()
        text.append(" Findings ", style="bold reverse")
        text.append(f"  {len(items)} now", style="dim")
        if not items:
            text.append("\n\n  nothing to report", style="green")
        for item in items:
            text.append("\n\n")
            # each field wrapped between words under its own start
            text.append_text(hanging(findings_text.block(item, with_rule=False), width))
        return text


class FindingsScreen(Screen[object]):
    BINDINGS = [Binding("escape,q,f", "close", "Close")]

    def compose(self) -> ComposeResult:
        yield BannerPanel(id="banner")
        with VerticalScroll():
            yield FindingsPanel(id="findings-list")
        yield Footer()

    def on_mount(self) -> None:
        self.refresh_data()

    def refresh_data(self) -> None:
        try:
            panel = self.query_one(FindingsPanel)
        except NoMatches:  # not composed yet, or already taken down
            return
        panel.items = list(cast(MonitorHost, self.app).session.current.findings)
        panel.redraw()

    def action_close(self) -> None:
        self.app.pop_screen()
