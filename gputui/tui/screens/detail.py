"""One process: its full command line, its numbers now, and their history."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import cast

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer

from gputui import fmt
from gputui.session import container_text, slurm_text
from gputui.session.process_sort import runtime_s
from gputui.session.process_view import TYPE_SHORT, display_command
from gputui.snapshot.model import ProcessSnapshot
from gputui.tui import render
from gputui.tui.monitor_host import MonitorHost
from gputui.tui.widgets.panels import BannerPanel
from gputui.tui.widgets.text_panel import TextPanel

#: per-process history series -> (label, unit)
SERIES = {
    "gpu_mem": ("GPU memory", "M"),
    "sm": ("%SM", "%"),
    "cpu": ("%CPU", "%"),
    "rss": ("host memory", "M"),
}


@dataclass
class DetailValues:
    """What the detail panel draws, handed down by its screen."""

    proc: ProcessSnapshot
    now_s: float = 0.0
    gone: bool = False
    other_gpus: list[int] = field(default_factory=list)
    #: series name (SERIES) -> values, oldest first
    series: dict[str, list[float | None]] = field(default_factory=dict)


class DetailPanel(TextPanel):
    #: users copy command lines and numbers from here: keep mouse selection
    SELECTABLE = True

    def __init__(self, values: DetailValues, ascii_only: bool, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.values = values
        self.ascii_only = ascii_only

    def build(self, width: int) -> Text:
        v = self.values
        proc = v.proc
        ascii_only = self.ascii_only
        lines: list[Text] = []
        title = Text()
        title.append(f" Process {proc.pid} ", style="bold reverse")
        name = fmt.clean(proc.name, 128)
        title.append(f"  {name}  user {fmt.clean(proc.user, 64)}", style="bold")
        if proc.hooked:
            title.append("  gputui hook: press a to attach", style="bold magenta")
        if v.gone:
            title.append("  (exited: last values shown)", style="bold red")
        lines.append(title)
        lines.append(Text(""))
        lines.append(Text("Command line", style="bold"))
        command = display_command(proc)
        for chunk in textwrap.wrap(command, max(20, width - 4)) or [fmt.NA]:
            lines.append(Text("  " + chunk))
        lines.append(Text(""))
        others = v.other_gpus
        facts = [
            ("GPU", f"{proc.gpu_index}  {fmt.clean(proc.gpu_uuid, 100)}"),
            ("also on GPU", ", ".join(map(str, others)) if others else "-"),
            ("type", f"{proc.type} ({TYPE_SHORT.get(proc.type, proc.type)})"),
            ("parent pid", fmt.NA if proc.ppid is None else str(proc.ppid)),
            ("started", fmt.clock(proc.start_time_s, with_date=True)),
            ("running for", fmt.duration(runtime_s(proc, v.now_s))),
            ("GPU memory", fmt.size(proc.gpu_mem_bytes)),
            ("%SM", fmt.pct(proc.sm_pct, 0)),
            ("%mem-bw", fmt.pct(proc.mem_bw_pct, 0)),
            ("%CPU", fmt.NA if proc.cpu_pct is None else f"{proc.cpu_pct:.0f}%"),
            ("host memory", fmt.size(proc.rss_bytes)),
        ]
        for name, value in facts:
            lines.append(Text.assemble((f"  {name:<12}", "dim"), value))
        for heading, section in (
            ("Container", container_text.facts(proc)),
            ("Slurm", slurm_text.facts(proc)),
        ):
            if section:
                lines.append(Text(""))
                lines.append(Text(heading, style="bold"))
                for name, value in section:
                    lines.append(Text.assemble((f"  {name:<12}", "dim"), value))
        lines.append(Text(""))
        lines.append(Text("History (newest right)", style="bold"))
        graph_w = max(10, width - 26)
        for series, (label, unit) in SERIES.items():
            values = v.series.get(series, [])
            present = [v for v in values if v is not None]
            top = 100.0 if unit == "%" else (max(present) if present else None)
            if series == "cpu" and present:
                top = max(100.0, *present)
            line = Text(f"  {label:<12}", style="bold")
            line.append_text(render.sparkline(values, graph_w, top, ascii_only))
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
    def gapp(self) -> MonitorHost:
        return cast(MonitorHost, self.app)

    def compose(self) -> ComposeResult:
        yield BannerPanel(id="banner")
        with VerticalScroll():
            yield DetailPanel(self._values(), self.gapp.ascii_only, id="detail")
        yield Footer()

    def on_mount(self) -> None:
        self.gapp.session.history.watch(self.proc.key)
        # its %CPU and host memory read at every refresh, however many processes
        self.gapp.session.in_view.set("detail", frozenset({self.proc.pid}))
        self.refresh_data()

    def on_unmount(self) -> None:
        self.gapp.session.in_view.clear("detail")

    def _values(self, gone: bool = False) -> DetailValues:
        session = self.gapp.session
        proc = self.proc
        snapshot = session.current.snapshot
        others = [
            p.gpu_index
            for p in (snapshot.processes if snapshot else ())
            if p.key[1] == proc.key[1] and p.gpu_uuid != proc.gpu_uuid
        ]
        series = {name: list(session.history.process_series(proc.key, name)) for name in SERIES}
        return DetailValues(proc, session.current.data_time_s, gone, others, series)

    def refresh_data(self) -> None:
        if not self.is_mounted:
            return
        panel = self.query_one(DetailPanel)
        snapshot = self.gapp.session.current.snapshot
        gone = panel.values.gone
        if snapshot is not None:
            match = next((p for p in snapshot.processes if p.key == self.proc.key), None)
            gone = match is None
            if match is not None:
                self.proc = match
        panel.values = self._values(gone)
        panel.redraw()

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_signal(self) -> None:
        self.gapp.request_signal(self.proc)

    def action_attach(self) -> None:
        self.gapp.request_attach(self.proc)
