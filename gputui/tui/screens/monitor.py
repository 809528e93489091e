"""The main screen: devices, history, host, processes, findings."""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING, TypeVar, cast

from textual import events, on, work
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Input

from gputui.host import processes
from gputui.session.process_view import SORTABLE, ProcFilter
from gputui.snapshot.history import GPU_METRICS
from gputui.tui.compositor import use_line_compositor
from gputui.tui.monitor_host import MonitorHost
from gputui.tui.widgets.devices import DevicePanel
from gputui.tui.widgets.panels import (
    BannerPanel,
    FindingsBar,
    HeaderPanel,
    HistoryPanel,
    HostPanel,
    header_state_from,
)
from gputui.tui.widgets.processes import ProcessTable
from gputui.tui.widgets.text_panel import TextPanel

if TYPE_CHECKING:
    from rich.text import Text

_W = TypeVar("_W", bound=Widget)

#: below this height the graphs are hidden and the host panel is one line
SMALL_HEIGHT = 32
TYPE_CYCLE = (None, "compute", "graphics")


class StatusLine(TextPanel):
    """Process count, sort, filter and view mode, above the table."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.parts: list[tuple[str, str]] = []

    def build(self, width: int) -> Text:
        from rich.text import Text

        text = Text()
        for part, style in self.parts:
            text.append(part, style=style)
        return text


class MonitorScreen(Screen[object]):
    BINDINGS = [
        Binding("slash", "filter", "Filter"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("s", "sort(1)", "Sort"),
        Binding("S", "sort(-1)", "Sort back", show=False),
        Binding("r", "reverse", "Reverse", show=False),
        Binding("t", "tree", "Tree", show=False),
        Binding("u", "user_filter", "User", show=False),
        Binding("x", "type_filter", "Type", show=False),
        Binding("k", "signal", "Kill"),
        Binding("a", "attach", "Attach"),
        Binding("c", "compact", "Compact", show=False),
        Binding("g", "graphs", "Graphs", show=False),
        Binding("m", "metric", "Metric", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        use_line_compositor(self)
        self.compact_override: bool | None = None
        self.graphs_override: bool | None = None
        self._resolving = False
        self._panels: dict[type[Widget], Widget] = {}

    @property
    def gapp(self) -> MonitorHost:
        return cast("MonitorHost", self.app)

    def compose(self) -> ComposeResult:
        ascii_only = self.gapp.ascii_only
        yield HeaderPanel(id="header")
        yield BannerPanel(id="banner")
        yield DevicePanel(id="devices", ascii_only=ascii_only)
        with Horizontal(id="middle"):
            yield HistoryPanel(id="graphs", ascii_only=ascii_only)
            yield HostPanel(id="host", ascii_only=ascii_only)
        yield StatusLine(id="procbar")
        yield Input(
            placeholder="filter: words, user:NAME, gpu:N, type:compute|graphics (esc clears)",
            id="filter",
        )
        yield ProcessTable(id="processes", ascii_only=ascii_only)
        yield FindingsBar(id="findings")
        yield Footer()

    def on_mount(self) -> None:
        app = self.gapp
        if app.ascii_only:
            self.add_class("-ascii")
        header = self.query_one(HeaderPanel)
        # A recording's full label is on the banner line under the header: the
        # header says only which kind of data this is, so host and clock fit.
        source = app.session.source
        header.state.label = (
            ("DEMO" if source.label.startswith("DEMO") else "REPLAY")
            if source.is_recording
            else source.label
        )
        header.state.is_recording = source.is_recording
        header.state.banner = app.banner
        header.state.readonly = app.readonly
        self.query_one(Input).display = False
        table = self.query_one(ProcessTable)
        table.on_view = partial(app.session.in_view.set, "table")
        table.on_host_order = partial(app.session.in_view.order_by_host, "table")
        table.focus()
        self._apply_layout()
        self.refresh_data()

    def on_screen_resume(self) -> None:
        self.refresh_data()

    def on_resize(self, _event: events.Resize) -> None:
        self._apply_layout()

    # -- layout ----------------------------------------------------------------

    @property
    def small(self) -> bool:
        return self.size.height < SMALL_HEIGHT

    def _apply_layout(self) -> None:
        devices = self.query_one(DevicePanel)
        height = self.size.height or self.app.size.height
        auto_compact = devices.full_height() > max(4, height // 2 - 1)
        compact = auto_compact if self.compact_override is None else self.compact_override
        small = height < SMALL_HEIGHT
        graphs = (not small) if self.graphs_override is None else self.graphs_override
        host = self.query_one(HostPanel)
        graphs_panel = self.query_one(HistoryPanel)
        changed = (
            devices.compact != compact
            or host.compact != (not graphs)
            or (graphs_panel.display != graphs)
        )
        devices.compact = compact
        host.compact = not graphs
        graphs_panel.display = graphs
        self.set_class(not graphs, "-nographs")
        if changed:
            devices.redraw()
            host.redraw()
            graphs_panel.redraw()

    @property
    def compact(self) -> bool:
        return self.query_one(DevicePanel).compact

    # -- data --------------------------------------------------------------------

    def _one(self, kind: type[_W]) -> _W:
        """``query_one(kind)``, remembered: the screen's panels stay for its life
        (a query walks the screen's widgets, several times at every refresh)."""
        widget = self._panels.get(kind)
        if widget is None or widget.parent is None:
            widget = self._panels[kind] = self.query_one(kind)
        return widget  # type: ignore[return-value]

    def refresh_data(self) -> None:
        if not self.is_mounted:
            return
        session = self.gapp.session
        current = session.current
        poller = session.poller
        header = self._one(HeaderPanel)
        state = header.state
        state.interval_s = poller.interval_s
        source = session.source
        speed = getattr(source, "speed", 1.0)
        recorded = getattr(getattr(source, "header", None), "interval_s", None)
        state.speed = float(speed) if isinstance(speed, (int, float)) else 1.0
        state.recorded_interval_s = float(recorded) if isinstance(recorded, (int, float)) else None
        state.paused = poller.paused
        snapshot = current.snapshot
        if snapshot is not None:
            header_state_from(snapshot, state)
            state.data_time_s = current.data_time_s
        if current.poll_error:
            state.error = current.poll_error
        header.redraw()
        self._one(BannerPanel).redraw()
        if snapshot is None:
            return
        devices = self._one(DevicePanel)
        grew = len(snapshot.devices) != len(devices.devices)
        devices.devices = snapshot.devices
        devices.ceilings = current.ceilings
        if grew:
            self._apply_layout()
        devices.redraw()
        self._one(HostPanel).show(snapshot.host)
        graphs = self._one(HistoryPanel)
        if graphs.display:
            graphs.show(session.history, snapshot.devices, poller.interval_s)
        table = self._one(ProcessTable)
        table.show(snapshot.processes, current.data_time_s)
        self._update_status()
        self._one(FindingsBar).show(current.findings)
        if table.tree_view and not session.source.is_recording:
            self._resolve_parents()

    def _update_status(self) -> None:
        table = self._one(ProcessTable)
        spec = table.sort_spec
        arrow = "desc" if spec.descending else "asc"
        parts: list[tuple[str, str]] = [
            (" Processes ", "bold"),
            (f"{table.shown}/{table.total}", ""),
            (f"   sort {spec.column} {arrow}", "dim"),
        ]
        if table.tree_view:
            parts.append(("   tree", "bold cyan"))
        if table.proc_filter.active:
            parts.append(("   filter: ", "dim"))
            parts.append((table.proc_filter.to_text(), "bold yellow"))
            if table.total and not table.shown:
                parts.append(("   no process matches (esc clears)", "bold"))
        for problem in table.proc_filter.problems:
            parts.append((f"   {problem}", "bold red"))
        if self.gapp.readonly:
            parts.append(("   read-only", "dim"))
        status = self._one(StatusLine)
        status.parts = parts
        status.redraw()

    @work(thread=True, exclusive=True, group="parents")
    def _resolve_parents_worker(self, pids: list[int]) -> None:
        # Reading /proc of other processes can block: never on the UI thread.
        names = processes.parent_commands(pids)
        self.app.call_from_thread(self._parents_resolved, names)

    def _resolve_parents(self) -> None:
        table = self.query_one(ProcessTable)
        missing = table.missing_parent_pids()
        if missing and not self._resolving:
            self._resolving = True
            self._resolve_parents_worker(missing)

    def _parents_resolved(self, names: dict[int, str]) -> None:
        self._resolving = False
        table = self.query_one(ProcessTable)
        table.parent_names.update(names)
        table.refresh_rows()

    # -- table events --------------------------------------------------------------

    @on(ProcessTable.HeaderSelected)
    def _header_clicked(self, event: ProcessTable.HeaderSelected) -> None:
        column = event.column
        if column in SORTABLE:
            table = self.query_one(ProcessTable)
            table.set_sort(table.sort_spec.on(column))
            self._update_status()

    @on(ProcessTable.RowSelected)
    def _row_selected(self, _event: ProcessTable.RowSelected) -> None:
        self.action_detail()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.query_one(ProcessTable).set_filter(ProcFilter.parse(event.value))
        self._update_status()

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        if not event.value.strip():
            event.input.display = False
        self.query_one(ProcessTable).focus()

    # -- actions --------------------------------------------------------------------

    def action_filter(self) -> None:
        box = self.query_one(Input)
        box.display = True
        box.focus()

    def _set_filter(self, flt: ProcFilter) -> None:
        box = self.query_one(Input)
        text = flt.to_text()
        box.value = text
        box.display = bool(text)
        self.query_one(ProcessTable).set_filter(flt)
        self._update_status()

    def action_clear_filter(self) -> None:
        self._set_filter(ProcFilter())
        self.query_one(ProcessTable).focus()

    def action_user_filter(self) -> None:
        table = self.query_one(ProcessTable)
        proc = table.selected_process
        flt = table.proc_filter
        if flt.users or proc is None or proc.user is None:
            self._set_filter(ProcFilter(flt.words, (), flt.gpus, flt.kind))
        else:
            self._set_filter(ProcFilter(flt.words, (proc.user,), flt.gpus, flt.kind))

    def action_type_filter(self) -> None:
        flt = self.query_one(ProcessTable).proc_filter
        kind = TYPE_CYCLE[(TYPE_CYCLE.index(flt.kind) + 1) % len(TYPE_CYCLE)]
        self._set_filter(ProcFilter(flt.words, flt.users, flt.gpus, kind))

    def action_sort(self, step: int) -> None:
        table = self.query_one(ProcessTable)
        table.set_sort(table.sort_spec.next(step))
        self._update_status()

    def action_reverse(self) -> None:
        table = self.query_one(ProcessTable)
        table.set_sort(table.sort_spec.toggled())
        self._update_status()

    def action_tree(self) -> None:
        table = self.query_one(ProcessTable)
        table.set_tree(not table.tree_view)
        self._update_status()
        if table.tree_view and not self.gapp.session.source.is_recording:
            self._resolve_parents()

    def action_signal(self) -> None:
        self.gapp.request_signal(self.query_one(ProcessTable).selected_process)

    def action_attach(self) -> None:
        self.gapp.request_attach(self.query_one(ProcessTable).selected_process)

    def action_detail(self) -> None:
        proc = self.query_one(ProcessTable).selected_process
        if proc is None:
            return
        from gputui.tui.screens.detail import ProcessDetailScreen

        self.app.push_screen(ProcessDetailScreen(proc))

    def action_compact(self) -> None:
        self.compact_override = not self.compact
        self._apply_layout()

    def action_graphs(self) -> None:
        self.graphs_override = not self.query_one(HistoryPanel).display
        self._apply_layout()
        self.refresh_data()

    def action_metric(self) -> None:
        graphs = self.query_one(HistoryPanel)
        names = list(GPU_METRICS)
        graphs.metric = names[(names.index(graphs.metric) + 1) % len(names)]
        graphs.redraw()

    def palette_commands(self) -> Iterable[SystemCommand]:
        yield SystemCommand("Compact devices", "One line per GPU", self.action_compact)
        yield SystemCommand("Tree view", "Processes under their parents", self.action_tree)
        yield SystemCommand("Graphs", "Show or hide the history graphs", self.action_graphs)
        yield SystemCommand("Graph metric", "Cycle util/memory/power/tensor", self.action_metric)
        yield SystemCommand("Filter processes", "Words, user:, gpu:, type:", self.action_filter)
