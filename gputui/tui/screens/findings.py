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

from gputui import fmt
from gputui.analysis.finding import Finding
from gputui.tui.host import MonitorHost
from gputui.tui.render import SEVERITY_STYLE
from gputui.tui.widgets.panels import BannerPanel
from gputui.tui.widgets.text_panel import TextPanel


class FindingsPanel(TextPanel):
    """Every finding with its evidence, what it costs, the fix, how to confirm it
    and where the rule comes from."""

    WRAP = True

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
            text.append(f" {item.severity.upper()} ", style=SEVERITY_STYLE[item.severity])
            text.append(f" {fmt.clean(item.scope, 80)}: {fmt.clean(item.title, 200)}", style="bold")
            text.append("\n   seen: ", style="dim")
            text.append(fmt.clean(item.evidence))
            if item.impact_pct is not None:
                text.append("\n   cost: ", style="dim")
                text.append(f"about {item.impact_pct:.0f}% of the step time")
                if item.impact_ms is not None:
                    text.append(f" ({item.impact_ms:.1f} ms per step)")
            text.append("\n   fix:  ", style="dim")
            text.append(fmt.clean(item.fix))
            if item.confirm:
                text.append("\n   then: ", style="dim")
                text.append(fmt.clean(item.confirm))
            if item.source:
                text.append("\n   from: ", style="dim")
                text.append(fmt.clean(item.source), style="dim")
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
        panel.items = list(cast(MonitorHost, self.app).current.findings)
        panel.redraw()

    def action_close(self) -> None:
        self.app.pop_screen()
