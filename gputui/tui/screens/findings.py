"""All current findings, each with its evidence and the usual fix."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer

from gputui.tui.widgets.panels import SEVERITY_STYLE, BannerPanel
from gputui.tui.widgets.text_panel import TextPanel

if TYPE_CHECKING:
    from gputui.tui.app import GputuiApp


class FindingsPanel(TextPanel):
    WRAP = True

    def build(self, width: int) -> Text:
        app = cast("GputuiApp", self.app)
        items = app.current.findings
        text = Text()
        text.append(" Findings ", style="bold reverse")
        text.append(f"  {len(items)} now", style="dim")
        if not items:
            text.append("\n\n  nothing to report", style="green")
        for item in items:
            text.append("\n\n")
            text.append(f" {item.severity.upper()} ", style=SEVERITY_STYLE[item.severity])
            text.append(f" {item.scope}: {item.title}", style="bold")
            text.append("\n   seen: ", style="dim")
            text.append(item.evidence)
            text.append("\n   fix:  ", style="dim")
            text.append(item.fix)
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
        if self.is_mounted:
            self.query_one(FindingsPanel).redraw()

    def action_close(self) -> None:
        self.app.pop_screen()
