"""The rank view: every local rank of a multi-rank job in one table, the
straggler and communication findings, synchronized captures.

Each rank's connection fills its own :class:`AttachState` on its own thread
(:mod:`gputui.session.rank_feeds`).  A 4 Hz timer looks at the states'
versions; when something changed, and at most once a second after the first
full view (statistics over 1,000 steps of every rank are the costly part), it
builds a :class:`RanksSummary` of plain values and hands it to the panels.
Enter opens the selected rank's own attach screen on the same state.
"""

from __future__ import annotations

import time
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer

from gputui import fmt
from gputui.analysis.auto_capture import capture_cost
from gputui.analysis.engine import analyze_ranks
from gputui.analysis.finding import Finding
from gputui.analysis.rules.ranks import wait_hint
from gputui.errors import GputuiError
from gputui.session.attach import StateSnapshot
from gputui.session.autocapture import (
    ASKED,
    FAILED,
    WAITING,
    AutoCapture,
    cost_parts,
    kind_of,
)
from gputui.session.autocapture import KEY as AUTO_KEY
from gputui.session.feeds import CAPTURE_STEPS
from gputui.session.rank_feeds import LiveRanksFeed, ReplayRanksFeed, rank_input
from gputui.session.rank_view import EXITED, RankRow, RanksSummary, enough_steps, summarize
from gputui.trace.kernels import short_kernel_name
from gputui.tui import render
from gputui.tui.attach.findings import JobFindingsScreen
from gputui.tui.attach.rank_table import SORTABLE, RankTable
from gputui.tui.attach.screen import AttachAppBase, AttachScreen
from gputui.tui.render import finding_line, findings_count, hanging, join_parts
from gputui.tui.widgets.panels import BannerPanel
from gputui.tui.widgets.text_panel import TextPanel

REFRESH_HZ = 4.0
#: statistics and rules are recomputed at most this often once the view is
#: full, and every RANKS_PER_SECOND ranks add a second to that (at 8 ranks of
#: 100 steps/s they are most of the view's cost)
STATS_PERIOD_S = 1.0
RANKS_PER_SECOND = 4
#: steps of each rank the view's statistics cover (the newest)
VIEW_WINDOW = 500
#: below this height: no compute lines, one finding, three capture rows
SHORT_HEIGHT = 34

RanksFeed = LiveRanksFeed | ReplayRanksFeed


class RanksHeader(TextPanel):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.label = ""
        self.command = ""
        self.summary: RanksSummary | None = None
        self.note = ""

    def build(self, width: int) -> Text:
        title = Text()
        title.append(" gputui attach ", style="bold reverse")
        title.append(f" {fmt.clean(self.label)}", style="bold")
        # The job's command line is cut (the rank table and a rank's screen say
        # more); the label and the state wrap between words.
        command = Text(" " + fmt.truncate(fmt.clean(self.command), width - 2), style="dim")
        s = self.summary
        state = Text(" ")
        if s is None:
            state.append("connecting to the ranks...", style="dim")
        else:
            running = sum(1 for r in s.rows if r.state not in (EXITED,))
            state.append(f"{running} of {s.local} local ranks connected")
            if s.leader_step is not None:
                state.append(f", leading step {s.leader_step}")
            if s.remote:
                state.append(f", {s.remote} on other nodes", style="yellow")
        if self.note:
            state.append(f"  {self.note}", style="dim")
        lines = [hanging(title, width, 16), command, hanging(state, width, 1)]
        return Text("\n").join(lines)


class AlertPanel(TextPanel):
    """A stalled job or a rank gone; the ranks on other nodes."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.summary: RanksSummary | None = None

    def build(self, width: int) -> Text:
        s = self.summary
        lines: list[Text] = []
        if s is not None and s.alert:
            lines.append(Text(" " + fmt.clean(s.alert), style="bold red"))
        text = None if s is None else s.missing_text()
        if text:
            lines.append(Text(" " + text, style="yellow"))
        return Text("\n").join(lines) if lines else Text()


class ComputePanel(TextPanel):
    """Each rank's compute time per step (its step less its comm wait) over the
    newest steps: the straggler's line sits above the others."""

    def __init__(self, *, id: str | None = None, ascii_only: bool = False) -> None:
        super().__init__(id=id)
        self.summary: RanksSummary | None = None
        self.ascii_only = ascii_only
        self.rows = 8

    def build(self, width: int) -> Text:
        title = Text()
        title.append(" Compute per step ", style="bold reverse")
        title.append("  each rank's step less its time in collectives, newest right", style="dim")
        title = hanging(title, width, 20)
        s = self.summary
        if s is None or not any(r.compute_history for r in s.rows):
            return title
        top = max((max(r.compute_history) for r in s.rows if r.compute_history), default=1.0)
        lines = [title]
        shown = sorted(s.rows, key=lambda r: -(r.compute_s or 0.0))[: self.rows]
        spark = max(8, width - 24)
        for row in shown:
            line = Text(f" {row.label:<9}", style="bold")
            line.append_text(
                render.sparkline(row.compute_history, spark, top, self.ascii_only, style="cyan")
            )
            line.append(f" {fmt.ms(row.compute_s):>8}")
            lines.append(line)
        if len(s.rows) > len(shown):
            lines.append(Text(f" +{len(s.rows) - len(shown)} more ranks", style="dim"))
        return Text("\n").join(lines)


class RankFindings(TextPanel):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.findings: tuple[Finding, ...] = ()
        self.ready = False
        self.rows = 3
        #: what to do when the phases differ and no rule can say who waits
        self.hint: str | None = None

    def build(self, width: int) -> Text:
        title = Text()
        title.append(" Findings across ranks ", style="bold reverse")
        hang = len(title) + 2
        if not self.ready:
            title.append("  the rank rules wait for 20 ordinary steps on two ranks", style="dim")
            return hanging(title, width, hang)
        if not self.findings:
            if self.hint:
                title.append(f"  {self.hint}", style="yellow")
            else:
                title.append("  the ranks keep pace with each other", style="dim green")
            return hanging(title, width, hang)
        more = len(self.findings) - self.rows
        title.append("  " + findings_count(len(self.findings), more, width - hang), style="dim")
        rows = [finding_line(f, width) for f in self.findings[: self.rows]]
        return Text("\n").join([title, *rows])


class RankCapturePanel(TextPanel):
    """The synchronized capture's state, and the highlighted rank's kernels."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.row: RankRow | None = None
        #: ranks whose latest capture covers the same steps as this row's
        self.same_steps = 0
        self.progress = ""
        self.is_replay = False
        self.kernel_rows = 6
        #: the automatic capture's line, or what the highlighted rank's capture
        #: cost it (parts and styles); empty: nothing to say
        self.about: list[tuple[str, str]] = []

    def _about(self, width: int) -> list[Text]:
        if not self.about:
            return []
        line = Text(" ")
        # the sentence is cut to fit; of the details after it, those that fit whole
        join_parts(line, self.about, width, cut_first=True)
        return [line]

    def build(self, width: int) -> Text:
        text = Text()
        text.append(" Capture ", style="bold reverse")
        if self.progress:
            text.append(f"  {self.progress}", style="yellow")
        row = self.row
        cap = None if row is None else row.capture
        if cap is None:
            hint = (
                "  none recorded" if self.is_replay else "  p: profile the same steps on every rank"
            )
            text.append(hint, style="dim")
            return Text("\n").join([hanging(text, width, 11), *self._about(width)])
        assert row is not None
        text.append(f"  {row.label}: steps {cap.first_step}..{cap.last_step}")
        if self.same_steps > 1:
            text.append(f" (the same steps on {self.same_steps} ranks)", style="dim")
        if cap.busy_pct is not None:
            text.append(f", GPU busy {cap.busy_pct:.0f}%")
        if cap.comm_span_share is not None:
            text.append(f", comm kernels {cap.comm_span_share * 100:.0f}% of the span")
        if cap.overlap is not None:
            text.append(f", overlapped {cap.overlap * 100:.0f}%")
        text = Text("\n").join([hanging(text, width, 11), *self._about(width)])
        if not cap.kernels:  # a CPU job: its top CPU ops
            table = Table(box=None, show_header=True, header_style="bold")
            table.add_column("CPU op (no GPU kernels)")
            table.add_column("calls", justify="right")
            table.add_column("self", justify="right")
            for op in cap.cpu_ops[: self.kernel_rows]:
                table.add_row(
                    Text(fmt.truncate(fmt.clean(op.name), max(10, width - 30))),
                    str(op.calls),
                    fmt.us(op.self_us),
                )
            return Text("\n").join([text, *_table_lines(table, width)])
        table = Table(box=None, show_header=True, header_style="bold")
        for col, justify in (("kernel", "left"), ("class", "left"), ("calls", "right")):
            table.add_column(col, justify=justify)  # type: ignore[arg-type]
        table.add_column("total", justify="right")
        table.add_column("share", justify="right")
        for k in cap.kernels[: self.kernel_rows]:
            table.add_row(
                Text(fmt.truncate(fmt.clean(short_kernel_name(k.name)), max(10, width - 40))),
                Text(fmt.clean(k.kernel_class, 14)),
                str(k.calls),
                fmt.us(k.total_us),
                f"{k.share * 100:.0f}%",
            )
        return Text("\n").join([text, *_table_lines(table, width)])


def _span(row: RankRow) -> tuple[int | None, int | None] | None:
    cap = row.capture
    return None if cap is None else (cap.first_step, cap.last_step)


def _table_lines(table: Table, width: int) -> list[Text]:
    from rich.console import Console

    console = Console(width=max(20, width), no_color=False, record=False)
    lines = console.render_lines(table, console.options.update(width=max(20, width)))
    out = []
    for segments in lines:
        line = Text()
        for seg in segments:
            line.append(seg.text, seg.style)
        out.append(line)
    return out


class RanksScreen(Screen[object]):
    HELP_TOPIC = "ranks"
    DEFAULT_CSS = """
    RanksScreen { layout: vertical; }
    RanksScreen #ranks-header { height: auto; background: $panel; }
    RanksScreen #ranks-banner { height: auto; max-height: 3; }
    RanksScreen #ranks-table { height: auto; max-height: 50%; overflow-y: auto; }
    RanksScreen #ranks-findings { margin-top: 1; }
    RanksScreen #ranks-compute { margin-top: 1; }
    RanksScreen #ranks-capture { margin-top: 1; padding: 0 1 0 0; }
    RanksScreen.-short #ranks-findings { margin-top: 0; }
    RanksScreen.-short #ranks-capture { margin-top: 0; }
    RanksScreen.-short #ranks-compute { display: none; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open_rank", "Open"),
        Binding("up", "cursor(-1)", "Up", show=False),
        Binding("down", "cursor(1)", "Down", show=False),
        Binding("pageup", "cursor(-10)", show=False),
        Binding("pagedown", "cursor(10)", show=False),
        Binding("s", "sort", "Sort"),
        Binding("S", "reverse", "Reverse", show=False),
        Binding("p", "capture", "Capture"),
        Binding(AUTO_KEY, "auto_capture", "Auto capture"),
        Binding("f", "findings", "Findings"),
        Binding("r", "reconnect", "Reconnect"),
    ]
    #: who queues a capture behind the automatic one (a rank's screen queues its own)
    USER = "ranks"

    def __init__(
        self, feed: RanksFeed, *, autostart: bool = True, auto: AutoCapture | None = None
    ) -> None:
        super().__init__()
        self.feed = feed
        self.autostart = autostart
        #: the automatic capture: one synchronized capture of every rank (None: a
        #: recording)
        self.auto = None if feed.is_replay else auto
        self.summary: RanksSummary | None = None
        self.findings: tuple[Finding, ...] = ()
        self.refreshes = 0
        self.first_full_at: float | None = None  # monotonic time of the first full view
        self._started = time.monotonic()
        self._versions: tuple[int, ...] = ()
        self._built_at = 0.0
        self._timer: Timer | None = None
        self._capture_note = ""

    @property
    def ascii_only(self) -> bool:
        return bool(getattr(self.app, "ascii_only", False))

    def compose(self) -> ComposeResult:
        yield RanksHeader(id="ranks-header")
        yield BannerPanel(id="ranks-banner")
        yield AlertPanel(id="ranks-alert")
        yield RankTable(id="ranks-table", ascii_only=self.ascii_only)
        yield RankFindings(id="ranks-findings")
        yield ComputePanel(id="ranks-compute", ascii_only=self.ascii_only)
        yield RankCapturePanel(id="ranks-capture")
        yield Footer()

    def on_mount(self) -> None:
        header = self.query_one(RanksHeader)
        header.label = self.feed.label
        first = self.feed.links[0].hello if self.feed.links else None
        header.command = "" if first is None else fmt.clean_all(first.argv)
        self.query_one(RankCapturePanel).is_replay = self.feed.is_replay
        self._apply_layout()
        self._timer = self.set_interval(1.0 / REFRESH_HZ, self.refresh_view)
        if self.autostart:
            self._connect_worker()
        # is_mounted turns true only after on_mount returns: draw right after.
        self.call_after_refresh(self.refresh_view, True)

    def on_unmount(self) -> None:
        if self._timer is not None:
            self._timer.stop()
        self.feed.close()

    def on_resize(self, _event: events.Resize) -> None:
        self._apply_layout()

    def _apply_layout(self) -> None:
        height = self.size.height or self.app.size.height
        short = height < SHORT_HEIGHT
        self.set_class(short, "-short")
        self.query_one(RankFindings).rows = 1 if short else 3
        self.query_one(RankCapturePanel).kernel_rows = 3 if short else 6
        if self.summary is not None:
            self._show(self.summary)

    @work(thread=True, exclusive=True, group="ranks-connect")
    def _connect_worker(self) -> None:
        # Sockets and hellos block: never on the UI thread.
        try:
            self.feed.connect()
        except GputuiError as exc:
            self.app.call_from_thread(self.notify, str(exc), severity="error")

    def replay_to(self, seconds: float) -> None:
        """Play a recording up to ``seconds`` on this thread and draw it (tests,
        screenshots)."""
        feed = self.feed
        if not isinstance(feed, ReplayRanksFeed):
            raise TypeError("replay_to needs a ReplayRanksFeed")
        if feed.played_s == 0.0 and feed.finished is False:
            feed.connect(autoplay=False)
        feed.advance_to(seconds)
        if self.is_mounted:
            self.refresh_view(force=True)
        else:  # called before the screen was mounted: draw once it is
            self.call_after_refresh(self.refresh_view, True)

    # -- refreshing ------------------------------------------------------------------------
    def _full(self) -> bool:
        """Every rank has sent its history (or is known to be gone)."""
        for link in self.feed.links:
            snap = link.state.snapshot()
            gone = snap.disconnected is not None or snap.connect_error is not None
            if not (snap.synced or gone):
                return False
        return bool(self.feed.links)

    def refresh_view(self, force: bool = False) -> None:
        if not self.is_mounted:
            return
        versions = tuple(link.state.version for link in self.feed.links)
        tick = time.monotonic()
        changed = versions != self._versions
        full = self.first_full_at is not None
        period = max(STATS_PERIOD_S, len(versions) / RANKS_PER_SECOND)
        if not force and not changed and tick - self._built_at < period:
            return
        if not force and full and tick - self._built_at < period:
            return  # the costly part once a period once the view is full
        self._versions = versions
        self._built_at = tick
        snaps = [(link.state.snapshot(), link.hello) for link in self.feed.links]
        self._auto_step([snap for snap, _hello in snaps])
        inputs = [rank_input(snap, hello) for snap, hello in snaps]
        summary = summarize(inputs, self.feed.now(), VIEW_WINDOW)
        self.summary = summary
        self.findings = tuple(analyze_ranks(summary.evidence))
        self.refreshes += 1
        full_now = self.first_full_at is None and self._full()
        self._show(summary)
        if full_now:
            self.first_full_at = time.monotonic()  # drawn from every rank's history

    def _show(self, summary: RanksSummary) -> None:
        header = self.query_one(RanksHeader)
        header.summary = summary
        feed = self.feed
        if isinstance(feed, ReplayRanksFeed):
            header.note = f"replay {feed.played_s:.0f}/{feed.duration_s:.0f}s" + (
                " ended (r: again)" if feed.finished else ""
            )
        header.redraw()
        alert = self.query_one(AlertPanel)
        alert.summary = summary
        alert.redraw()
        self._fill_table(summary)
        panel = self.query_one(RankFindings)
        panel.findings = self.findings
        panel.ready = enough_steps(summary)
        panel.hint = wait_hint(summary.evidence) if panel.ready and not self.findings else None
        panel.redraw()
        compute = self.query_one(ComputePanel)
        compute.summary = summary
        compute.redraw()
        self._show_capture()

    def _fill_table(self, summary: RanksSummary) -> None:
        self.query_one(RankTable).show(summary.rows)

    @property
    def sort_key(self) -> str:
        return self.query_one(RankTable).sort_key

    @property
    def sort_reverse(self) -> bool:
        return self.query_one(RankTable).sort_reverse

    @property
    def order(self) -> list[int]:
        """The ranks' pids in the order shown."""
        return self.query_one(RankTable).order

    def selected_pid(self) -> int | None:
        return self.query_one(RankTable).selected

    def _selected_row(self) -> RankRow | None:
        pid = self.selected_pid()
        summary = self.summary
        if summary is None or pid is None:
            return None
        return next((r for r in summary.rows if r.pid == pid), None)

    def _show_capture(self) -> None:
        panel = self.query_one(RankCapturePanel)
        row = panel.row = self._selected_row()
        span = None if row is None or row.capture is None else _span(row)
        rows = () if self.summary is None else self.summary.rows
        panel.same_steps = sum(1 for r in rows if span is not None and _span(r) == span)
        panel.progress = self._capture_progress()
        panel.about = self._about(row)
        panel.redraw()

    def _about(self, row: RankRow | None) -> list[tuple[str, str]]:
        """The automatic capture while it waits or runs (or why it did not),
        else what the highlighted rank's capture cost it."""
        snaps = [link.state.snapshot() for link in self.feed.links]
        auto = None if self.auto is None else self.auto.line(snaps)
        if auto is not None and auto.state in (WAITING, ASKED, FAILED):
            parts = [(auto.text, "yellow" if auto.state != WAITING else "dim")]
            return [*parts, (auto.detail, "dim")] if auto.detail else parts
        link = next((lk for lk in self.feed.links if row is not None and lk.pid == row.pid), None)
        snap = None if link is None else link.state.snapshot()
        if snap is not None and snap.capture is not None:
            cost = capture_cost(snap.steps, snap.capture)
            if cost is not None or not snap.capture.replay:
                automatic = snap.capture.auto or (
                    auto is not None and auto.capture_id == snap.capture.id
                )
                who = kind_of(snap.capture, automatic)
                first, *rest = cost_parts(cost, snap.capture.stop_ms)
                label = link.label if link is not None else "this rank"
                parts = [(f"{who} on {label}: {first}", ""), *((p, "") for p in rest)]
                if auto is not None and auto.user_waits:
                    parts.insert(1, ("your capture (p) goes next", "yellow"))
                return parts
        return [] if auto is None else [(auto.text, "dim")]

    # -- the automatic capture ---------------------------------------------------------------
    def _auto_step(self, snaps: list[StateSnapshot]) -> None:
        """Ask every rank for the automatic capture when it is due (one
        synchronized capture); send a capture the user asked for meanwhile once
        it has ended."""
        auto = self.auto
        if auto is None:
            return
        cid = auto.due(snaps, self.feed.now())
        if cid is not None:
            self._auto_worker(cid)
        if auto.take_user_turn(self.USER):
            self._capture_worker()

    @work(thread=True, exclusive=True, group="ranks-auto")
    def _auto_worker(self, cid: str) -> None:
        # Socket writes: off the UI thread.
        auto = self.auto
        assert auto is not None and isinstance(self.feed, LiveRanksFeed)
        try:
            ask = self.feed.request_capture(CAPTURE_STEPS, capture_id=cid, auto=True)
        except GputuiError as exc:
            auto.failed(str(exc))
            return
        note = f"steps {ask.start_step}..{ask.start_step + CAPTURE_STEPS - 1} on {ask.asked} ranks"
        if ask.errors:
            note += f" ({len(ask.errors)} not asked: {fmt.clean(ask.errors[0])})"
        self._capture_note = f"automatic capture of {note}"

    def action_auto_capture(self) -> None:
        if self.auto is None:
            self.notify("this is a recording: captures need a live job", severity="warning")
            return
        self.notify(self.auto.toggle())
        self._show_capture()

    def _capture_progress(self) -> str:
        waiting = sum(1 for link in self.feed.links if link.state.snapshot().capture_wanted)
        if not waiting:
            self._capture_note = ""
            return ""
        return f"{self._capture_note}: waiting for {waiting} ranks' results"

    @on(RankTable.Selected)
    def _clicked(self, event: RankTable.Selected) -> None:
        self.action_open_rank()

    # -- actions ---------------------------------------------------------------------------
    def action_open_rank(self) -> None:
        pid = self.selected_pid()
        link = next((lk for lk in self.feed.links if lk.pid == pid), None)
        if link is None:
            return
        self.app.push_screen(
            AttachScreen(
                self.feed.rank_feed(link),
                autostart=not self.feed.is_replay,
                state=link.state,
                auto=self.auto,
                drive_auto=False,  # the rank view asks every rank at once
            )
        )

    def action_cursor(self, delta: int) -> None:
        self.query_one(RankTable).move(delta)
        if self.summary is not None:
            self._show_capture()

    def _resort(self) -> None:
        table = self.query_one(RankTable)
        if self.summary is not None:
            table.show(self.summary.rows)

    def action_sort(self) -> None:
        table = self.query_one(RankTable)
        index = SORTABLE.index(table.sort_key) if table.sort_key in SORTABLE else -1
        table.sort_key = SORTABLE[(index + 1) % len(SORTABLE)]
        self._resort()

    def action_reverse(self) -> None:
        table = self.query_one(RankTable)
        table.sort_reverse = not table.sort_reverse
        self._resort()

    def action_findings(self) -> None:
        self.app.push_screen(JobFindingsScreen(self.findings))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "auto_capture" and self.feed.is_replay:
            return False  # nothing to capture in a recording: not shown
        if action == "capture" and self.feed.is_replay:
            return None
        return True

    def action_capture(self) -> None:
        if self.feed.is_replay:
            self.notify("this is a recording: captures need a live job", severity="warning")
            return
        if self.auto is not None and self.auto.user_capture(self.USER):
            self.notify("your capture waits for the automatic one, then profiles 5 steps")
            self._show_capture()
            return
        if any(link.state.snapshot().capture_wanted for link in self.feed.links):
            self.notify("a capture is already under way", severity="warning")
            return
        self._capture_worker()

    @work(thread=True, exclusive=True, group="ranks-capture")
    def _capture_worker(self) -> None:
        # Socket writes: off the UI thread.
        try:
            ask = self.feed.request_capture(CAPTURE_STEPS)
        except GputuiError as exc:
            self.app.call_from_thread(self.notify, str(exc), severity="error")
            return
        note = f"steps {ask.start_step}..{ask.start_step + CAPTURE_STEPS - 1} on {ask.asked} ranks"
        if ask.errors:
            note += f" ({len(ask.errors)} not asked: {fmt.clean(ask.errors[0])})"
        self._capture_note = f"capture of {note}"
        self.app.call_from_thread(self.notify, f"capture asked: {note}")

    def action_reconnect(self) -> None:
        feed = self.feed
        if isinstance(feed, ReplayRanksFeed):
            feed.connect()
            self.first_full_at = None
            self.refresh_view(force=True)
            return
        self._reconnect_worker()

    @work(thread=True, exclusive=True, group="ranks-connect")
    def _reconnect_worker(self) -> None:
        feed = self.feed
        if not isinstance(feed, LiveRanksFeed):
            return
        for link in feed.links:
            snap = link.state.snapshot()
            if snap.disconnected is not None or snap.connect_error is not None:
                feed.reconnect(link)


class RanksApp(AttachAppBase):
    """``gputui attach PID`` for a multi-rank job: the rank view first."""

    HELP_TOPIC = "ranks"

    feed: RanksFeed

    def get_default_screen(self) -> Screen[object]:
        auto = AutoCapture(enabled=self.auto_capture)
        return RanksScreen(self.feed, autostart=self.autostart, auto=auto)

    @property
    def ranks_screen(self) -> RanksScreen:
        screen = self.screen_stack[0] if self.screen_stack else self.screen
        assert isinstance(screen, RanksScreen)
        return screen
