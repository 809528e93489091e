"""One process: its full command line, its numbers now, and their history."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, cast

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer

from gputui.model import ProcessSnapshot
from gputui.tui import fmt
from gputui.tui.proc_view import TYPE_SHORT, runtime_s
from gputui.tui.widgets.panels import BannerPanel
from gputui.tui.widgets.text_panel import TextPanel

if TYPE_CHECKING:
    from gputui.tui.app import GputuiApp

#: per-process history series -> (label, unit)
SERIES = {
    "gpu_mem": ("GPU memory", "M"),
    "sm": ("%SM", "%"),
    "cpu": ("%CPU", "%"),
    "rss": ("host memory", "M"),
}


class DetailPanel(TextPanel):
    #: users copy command lines and numbers from here: keep mouse selection
    SELECTABLE = True

    def __init__(self, app: GputuiApp, proc: ProcessSnapshot, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.gapp = app
        self.proc = proc
        self.gone = False

    def build(self, width: int) -> Text:
        proc = self.proc
        app = self.gapp
        ascii_only = app.ascii_only
        now = app.current.data_time_s
        lines: list[Text] = []
        title = Text()
        title.append(f" Process {proc.pid} ", style="bold reverse")
        title.append(f"  {proc.name or fmt.NA}  user {proc.user or fmt.NA}", style="bold")
        if proc.hooked:
            title.append("  gputui hook: press a to attach", style="bold magenta")
        if self.gone:
            title.append("  (exited: last values shown)", style="bold red")
        lines.append(title)
        lines.append(Text(""))
        lines.append(Text("Command line", style="bold"))
        command = proc.command
        for chunk in textwrap.wrap(command, max(20, width - 4)) or [fmt.NA]:
            lines.append(Text("  " + chunk))
        lines.append(Text(""))
        others = [
            p.gpu_index
            for p in (app.current.snapshot.processes if app.current.snapshot else ())
            if p.pid == proc.pid and p.gpu_uuid != proc.gpu_uuid
        ]
        facts = [
            ("GPU", f"{proc.gpu_index}  {proc.gpu_uuid}"),
            ("also on GPU", ", ".join(map(str, others)) if others else "-"),
            ("type", f"{proc.type} ({TYPE_SHORT.get(proc.type, proc.type)})"),
            ("parent pid", fmt.NA if proc.ppid is None else str(proc.ppid)),
            ("started", fmt.clock(proc.start_time_s, with_date=True)),
            ("running for", fmt.duration(runtime_s(proc, now))),
            ("GPU memory", fmt.size(proc.gpu_mem_bytes)),
            ("%SM", fmt.pct(proc.sm_pct, 0)),
            ("%mem-bw", fmt.pct(proc.mem_bw_pct, 0)),
            ("%CPU", fmt.NA if proc.cpu_pct is None else f"{proc.cpu_pct:.0f}%"),
            ("host memory", fmt.size(proc.rss_bytes)),
        ]
        for name, value in facts:
            lines.append(Text.assemble((f"  {name:<12}", "dim"), value))
        lines.append(Text(""))
        lines.append(Text("History (newest right)", style="bold"))
        graph_w = max(10, width - 26)
        for series, (label, unit) in SERIES.items():
            values = list(app.history.process_series(proc.key, series))
            present = [v for v in values if v is not None]
            top = 100.0 if unit == "%" else (max(present) if present else None)
            if series == "cpu" and present:
                top = max(100.0, *present)
            line = Text(f"  {label:<12}", style="bold")
            line.append_text(fmt.sparkline(values, graph_w, top, ascii_only))
            last = values[-1] if values else None
            if last is None:
                shown = fmt.NA
            elif unit == "M":
                shown = fmt.size(last * 2**20)
            else:
                shown = f"{last:.0f}%"
            line.append(f" {shown:>9}")
            lines.append(line)
        return Text("\n").join(lines)


class ProcessDetailScreen(Screen[object]):
    BINDINGS = [
        Binding("escape,backspace", "back", "Back"),
        Binding("q", "back", "Back", show=False),
        Binding("k", "signal", "Kill"),
        Binding("a", "attach", "Attach"),
    ]

    def __init__(self, proc: ProcessSnapshot) -> None:
        super().__init__()
        self.proc = proc

    @property
    def gapp(self) -> GputuiApp:
        return cast("GputuiApp", self.app)

    def compose(self) -> ComposeResult:
        yield BannerPanel(id="banner")
        with VerticalScroll():
            yield DetailPanel(self.gapp, self.proc, id="detail")
        yield Footer()

    def on_mount(self) -> None:
        self.refresh_data()

    def refresh_data(self) -> None:
        if not self.is_mounted:
            return
        panel = self.query_one(DetailPanel)
        snapshot = self.gapp.current.snapshot
        if snapshot is not None:
            match = next((p for p in snapshot.processes if p.key == self.proc.key), None)
            panel.gone = match is None
            if match is not None:
                self.proc = panel.proc = match
        panel.redraw()

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_signal(self) -> None:
        self.gapp.request_signal(self.proc)

    def action_attach(self) -> None:
        self.gapp.request_attach(self.proc)
