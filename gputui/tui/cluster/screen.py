"""The cluster screen (``gputui cluster --prometheus URL`` or ``--ssh HOST...``) and
the app that runs it.

Data flow: a timer asks for a refresh every interval; a thread worker runs the
queries (``ClusterSource.fetch``, never on the UI thread) and posts the snapshot
as a message that collapses with an older one still queued.  Refreshes never
overlap: one that comes due while another is in flight is folded into it.  The
screen turns the snapshot's values into table rows and updates the tables by
row key, so the cursor stays on its node or rank.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer, Static

from gputui import fmt
from gputui.cluster.view import ClusterSnapshot, Node
from gputui.errors import GputuiError
from gputui.fmt import clock
from gputui.reports.text import plural
from gputui.tui.base import BaseApp
from gputui.tui.cluster.keyed_table import KeyedRow, KeyedTable
from gputui.tui.cluster.rows import (
    GPU_COLUMNS,
    HISTORY_COLUMN,
    JOB_COLUMNS,
    NODE_COLUMNS,
    PROCESS_COLUMNS,
    gpu_rows,
    job_rows,
    node_rows,
    process_rows,
)
from gputui.tui.messages import ClusterFailed, ClusterReady


class ClusterScreen(Screen[object]):
    CSS_PATH = "cluster.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "refresh_now", "Refresh"),
        Binding("tab", "app.focus_next", "Next table", show=False),
    ]

    def __init__(self, source: Any, interval_s: float, *, autostart: bool = True) -> None:
        super().__init__()
        self.source = source
        self.interval_s = interval_s
        self.autostart = autostart
        self.snapshot: ClusterSnapshot | None = None
        self.error: str | None = None
        self.selected_host: str | None = None
        self.refreshes = 0
        self.history_width = 30
        self._row_cache: dict[str, tuple[Node, KeyedRow]] = {}
        self._in_flight = False
        self._again = False
        #: the source reads processes (over SSH; Prometheus has none)
        self.has_processes = bool(getattr(source, "has_processes", False))

    @property
    def source_title(self) -> str:
        """What is read: Prometheus' URL, or the SSH nodes."""
        title = getattr(self.source, "title", None)
        return str(title) if title else str(self.source.client.base)

    @property
    def ascii_only(self) -> bool:
        return bool(getattr(self.app, "ascii_only", False))

    def compose(self) -> ComposeResult:
        # the history takes what the other columns leave, so nothing scrolls sideways
        self.history_width = max(8, min(60, self.app.size.width - 108))
        gpu_columns = (*GPU_COLUMNS, (HISTORY_COLUMN, self.history_width))
        yield Static(id="cl-header")
        yield Static(id="cl-status")
        yield KeyedTable(NODE_COLUMNS, id="cl-nodes")
        yield Static(id="cl-gpus-title", classes="cl-title")
        yield KeyedTable(gpu_columns, id="cl-gpus")
        if self.has_processes:
            yield Static(id="cl-procs-title", classes="cl-title")
            yield KeyedTable(PROCESS_COLUMNS, id="cl-procs")
        yield Static("Jobs and ranks", id="cl-jobs-title", classes="cl-title")
        yield KeyedTable(JOB_COLUMNS, id="cl-jobs")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#cl-nodes", KeyedTable).focus()
        self._show_header()
        self.query_one("#cl-status", Static).update(
            Text(f"reading {fmt.clean(self.source_title)} ...", style="dim")
        )
        if self.autostart:
            self.set_interval(self.interval_s, self.action_refresh_now)
            self.action_refresh_now()

    # -- refreshing ----------------------------------------------------------------------
    def action_refresh_now(self) -> None:
        if self._in_flight:
            self._again = True
            return
        self._in_flight = True
        self._fetch(self.selected_host)

    @work(thread=True, group="cluster-fetch")
    def _fetch(self, host: str | None) -> None:
        try:
            snapshot = self.source.fetch([host] if host else ())
        except GputuiError as exc:
            self.post_message(ClusterFailed(str(exc)))
        except Exception as exc:  # never a traceback on screen: one line
            self.post_message(
                ClusterFailed(f"gputui cluster: internal error: {type(exc).__name__}: {exc}")
            )
        else:
            self.post_message(ClusterReady(snapshot))

    def _done(self) -> None:
        self._in_flight = False
        if self._again:
            self._again = False
            self.action_refresh_now()

    def on_cluster_ready(self, message: ClusterReady) -> None:
        self.show(message.snapshot)
        self._done()

    def on_cluster_failed(self, message: ClusterFailed) -> None:
        self.error = message.error
        self.query_one("#cl-status", Static).update(
            Text(fmt.clean(message.error), style="bold red")
            + Text("  (showing the last data read)" if self.snapshot else "", style="dim")
        )
        self._done()

    # -- showing ------------------------------------------------------------------------
    def show(self, snapshot: ClusterSnapshot) -> None:
        """Put one snapshot's values on screen (also what tests call)."""
        before, self.snapshot = self.snapshot, snapshot
        self.error = None
        self.refreshes += 1
        # Prometheus' values change once per scrape interval (often 15 s) while the
        # view refreshes every few seconds: rows are rebuilt only when values moved.
        if before is None or before.nodes != snapshot.nodes:
            self.query_one("#cl-nodes", KeyedTable).set_rows(self._node_rows(snapshot.nodes))
        if self.selected_host is None and snapshot.nodes:
            self.selected_host = snapshot.nodes[0].hostname
            if not any(g.util_history for n in snapshot.nodes for g in n.gpus):
                self._again = True  # read the first node's GPUs and history at once
        if before is None or self._node(self.selected_host) != _node_in(before, self.selected_host):
            self._show_gpus()
        if before is None or before.jobs != snapshot.jobs:
            self.query_one("#cl-jobs", KeyedTable).set_rows(job_rows(snapshot.jobs))
        gpus = sum(n.gpu_count for n in snapshot.nodes)
        down = [n.hostname for n in snapshot.nodes if n.up is False]
        took = fmt.ms(snapshot.latency_s, decimals=0, space=True)
        status = Text(
            f"{plural(len(snapshot.nodes), 'node')}, {plural(gpus, 'GPU')}, "
            f"{plural(len(snapshot.jobs), 'job')}"
            f"  read {clock(snapshot.taken_at_s)} in {took}",
            style="dim",
        )
        if down:
            status.append(f"  down: {fmt.clean(', '.join(down), 80)}", style="bold red")
        self.query_one("#cl-status", Static).update(status)

    def _node_rows(self, nodes: Sequence[Node]) -> list[KeyedRow]:
        """Rows of ``nodes``, reusing the row of every node whose values did not move
        (Prometheus updates a node once per scrape, a few nodes per refresh)."""
        cache = self._row_cache
        rows = []
        for node in nodes:
            cached = cache.get(node.hostname)
            if cached is None or cached[0] != node:
                cached = cache[node.hostname] = (node, node_rows([node], self.ascii_only)[0])
            rows.append(cached[1])
        if len(cache) > 2 * len(nodes) + 16:  # forget nodes that left
            live = {n.hostname for n in nodes}
            for host in [h for h in cache if h not in live]:
                del cache[host]
        return rows

    def _show_header(self) -> None:
        base = fmt.clean(self.source_title)
        selector = fmt.clean(self.source.selector)
        text = Text("gputui cluster ", style="bold")
        text.append(base)
        if selector:
            text.append(f"  {{{selector}}}", style="cyan")
        text.append(f"  every {self.interval_s:g} s", style="dim")
        self.query_one("#cl-header", Static).update(text)

    def _node(self, host: str | None) -> Node | None:
        if self.snapshot is None or host is None:
            return None
        return next((n for n in self.snapshot.nodes if n.hostname == host), None)

    def _show_gpus(self) -> None:
        node = self._node(self.selected_host)
        title = self.query_one("#cl-gpus-title", Static)
        table = self.query_one("#cl-gpus", KeyedTable)
        if node is None:
            title.update(Text("GPUs", style="bold"))
            table.set_rows([])
            return
        title.update(
            Text("GPUs of ", style="bold")
            + Text(fmt.clean(node.hostname, 60), style="bold cyan")
            + Text(f"  ({node.source or 'no series'})", style="dim")
        )
        table.set_rows(gpu_rows(node.gpus, self.ascii_only, self.history_width))
        if self.has_processes:
            self.query_one("#cl-procs-title", Static).update(
                Text("Processes of ", style="bold")
                + Text(fmt.clean(node.hostname, 60), style="bold cyan")
                + Text(f"  ({len(node.processes)})", style="dim")
            )
            self.query_one("#cl-procs", KeyedTable).set_rows(process_rows(node.processes))

    @on(KeyedTable.Highlighted, "#cl-nodes")
    def _node_highlighted(self, event: KeyedTable.Highlighted) -> None:
        host = event.key
        if host == self.selected_host:
            return
        self.selected_host = host
        self._show_gpus()
        if self.autostart:
            self.action_refresh_now()  # this node's history


def _node_in(snapshot: ClusterSnapshot, host: str | None) -> Node | None:
    return next((n for n in snapshot.nodes if n.hostname == host), None)


class ClusterApp(BaseApp):
    TITLE = "gputui cluster"
    HELP_TOPIC = "cluster"

    def __init__(
        self, source: Any, interval_s: float, ascii_only: bool = False, autostart: bool = True
    ) -> None:
        super().__init__(ascii_only=ascii_only, autostart=autostart)
        self.source = source
        self.interval_s = interval_s
        self.started_s = time.monotonic()

    def get_default_screen(self) -> Screen[object]:
        return ClusterScreen(self.source, self.interval_s, autostart=self.autostart)


def make_cluster_app(
    source: Any, interval_s: float = 5.0, ascii_only: bool = False, autostart: bool = True
) -> ClusterApp:
    return ClusterApp(source, interval_s, ascii_only=ascii_only, autostart=autostart)
