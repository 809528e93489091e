"""The attach screen's Python view (key y): where the training thread's time
goes, by Python function, from the hook's stack sampler.

The hot functions of the newest profile, each with its share of the sampled
time (the step's wall time: ``time`` is what the function accounts for -- for
the job's own code with the library and torch code it calls --, ``self`` its
own frames, ``total`` with everything it calls), the phase it runs in, its
kind of code and its file:line; under them the call path of the selected one
(its callers on the hottest stack through it); then the DataLoader worker
processes' functions, aggregated over the workers, or why there are none.

The profile reaches :class:`AttachState` on the feed's thread (the hook sends
one about every 2 s; a recording holds them); this screen only reads the
state, and rebuilds its tables when a new profile object arrives.  Every name
in it comes from the job and is cleaned before display.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Footer
from textual.widgets.data_table import CellDoesNotExist

from gputui import fmt
from gputui.client.hook import profile_unavailable
from gputui.protocol.profile import PythonProfile
from gputui.reports.python import FunctionRow, function_rows, path_rows, workers_heading
from gputui.reports.text import plural
from gputui.session.attach import AttachState, StateSnapshot
from gputui.session.feeds import AttachFeed
from gputui.tui.attach.subscreen import StateScreen
from gputui.tui.attach.table import shorten
from gputui.tui.render import hanging, lead_width
from gputui.tui.widgets.panels import BannerPanel
from gputui.tui.widgets.text_panel import TextPanel

#: functions listed per table
TOP = 40
#: the columns of shares (right-aligned), then the phase's and the kind's widths;
#: the function column takes the rest
SHARES = ("time", "self", "total")
SHARE_W = 7
PHASE_W = 12
KIND_W = 8
MIN_NAME = 14
_KIND_STYLE = {"user": "bold", "torch": "cyan", "library": "magenta", "other": "dim"}


def profile_reason(snap: StateSnapshot, live: bool) -> str | None:
    """Why there is no profile to show, or None when there is one."""
    if snap.python_profile is not None:
        return None
    if snap.hello is None:
        return "waiting for the job's hello" if live else "the recording holds no hello"
    status = snap.status if snap.status is not None else snap.hello.status
    why = profile_unavailable(status.sampler)
    if why is not None:
        return why
    if not live:
        return "this recording holds no Python profile"
    return "waiting for the first profile (the hook sends one about every 2 s)"


def heading_text(snap: StateSnapshot, live: bool) -> Text:
    """The view's first lines: what the table shows, or why there is nothing."""
    text = Text()
    text.append(" Python on the training thread ", style="bold reverse")
    profile = snap.python_profile
    if profile is None:
        text.append("\n ")
        text.append(fmt.clean(profile_reason(snap, live) or ""), style="yellow")
        return text
    rate = f", {1 / profile.interval_s:.0f} Hz" if profile.interval_s else ""
    text.append(
        f"  last {profile.window_s:.0f} s, {plural(profile.samples, 'sample')}{rate}",
        style="dim",
    )
    text.append(
        "\n time: what it accounts for (your code: with the library calls it makes), "
        "self: its own frames, total: with all it calls; shares of the sampled time",
        style="dim",
    )
    for note in profile.notes[:2]:
        text.append(f"\n note: {fmt.clean(note, 200)}", style="yellow")
    return text


def path_text(profile: PythonProfile | None, row: FunctionRow | None, limit: int) -> Text:
    """The call path of the selected function: its callers outermost first
    (at most ``limit`` frames, the nearest), then the function."""
    text = Text()
    if profile is None or row is None:
        return text
    f = row.function
    text.append(" Call path of ", style="bold")
    text.append(row.name, style="bold")
    text.append(" (its hottest stack, outermost first)", style="dim")
    rows = path_rows(profile, f)
    if len(rows) == 1 and not f.path_cut:
        if profile.frames:
            text.append("\n   no callers sampled (a thread's entry point, or the table was full)")
        else:
            text.append("\n   no call paths from this hook (an older release)", style="dim")
    hidden = max(0, len(rows) - limit) + f.path_cut
    if hidden:
        text.append(f"\n   ... {plural(hidden, 'outer frame')}", style="dim")
    shown = rows[-limit:] if hidden else rows
    name_w = max((len(r[0]) for r in shown), default=0)
    for i, (name, where, kind) in enumerate(shown):
        last = i == len(shown) - 1
        text.append("\n " + (">" if last else " ") + " ")
        text.append(f"{name:<{min(name_w, 40)}}", style="bold" if last else "")
        text.append(f"  {where}  ")
        text.append(kind, style=_KIND_STYLE.get(kind, ""))
    return text


class HeadPanel(TextPanel):
    """A few lines of text, wrapped between words under their own start."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.text = Text()

    def build(self, width: int) -> Text:
        return hanging(self.text, width, lead_width)


class FunctionTable(DataTable[Any]):
    """Hot functions, keyed by kind, file and name: the cursor stays on its
    function across profiles."""

    DEFAULT_CSS = """
    FunctionTable {
        height: auto;
        scrollbar-size-horizontal: 0;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=False, cell_padding=0)
        self.rows_by_key: dict[str, FunctionRow] = {}
        self._shown: tuple[Any, ...] | None = None
        self._profile: PythonProfile | None = None

    def show(self, profile: PythonProfile | None) -> None:
        self._profile = profile
        self._rebuild()

    def on_resize(self) -> None:
        self._rebuild()

    def _rebuild(self) -> None:
        width = self.size.width or self.app.size.width
        name_w = max(MIN_NAME, width - len(SHARES) * SHARE_W - PHASE_W - KIND_W - 2)
        profile = self._profile
        key = (id(profile), name_w)
        if key == self._shown:
            return
        self._shown = key
        selected = self.selected_key
        self.clear(columns=True)
        for label in SHARES:
            self.add_column(Text(label, justify="right"), key=label, width=SHARE_W)
        self.add_column(" phase", key="phase", width=PHASE_W)
        self.add_column(" kind", key="kind", width=KIND_W)
        self.add_column(" function  file:line", key="function", width=name_w)
        self.rows_by_key = {}
        for row in function_rows(profile, TOP) if profile is not None else []:
            if row.key in self.rows_by_key:
                continue
            self.rows_by_key[row.key] = row
            place = f"{row.name}  {row.where}"
            self.add_row(
                Text(row.time, justify="right"),
                Text(row.self_share, justify="right"),
                Text(row.total, justify="right"),
                # Text, not str: DataTable reads markup in a string cell.
                Text(" " + shorten(row.phase, PHASE_W - 1)),
                Text(" " + row.kind, style=_KIND_STYLE.get(row.kind, "")),
                Text(" " + shorten(place, name_w - 1)),
                key=row.key,
            )
        if selected is not None and selected in self.rows_by_key:
            self.move_cursor(row=self.get_row_index(selected), animate=False)

    @property
    def selected_key(self) -> str | None:
        if not self.row_count:
            return None
        try:
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        except CellDoesNotExist:
            return None
        return None if key.value is None else str(key.value)

    @property
    def selected(self) -> FunctionRow | None:
        key = self.selected_key
        return None if key is None else self.rows_by_key.get(key)

    def names(self) -> list[str]:
        """Function names top to bottom (tests read this)."""
        return [self.rows_by_key[str(r.key.value)].function.function for r in self.ordered_rows]


class PythonScreen(StateScreen):
    """The Python profile of the training thread and of the DataLoader workers."""

    HELP_TOPIC = "attach"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("tab", "switch", "Thread/workers"),
        Binding("escape,y,q", "close", "Back"),
    ]
    DEFAULT_CSS = """
    PythonScreen { layout: vertical; }
    PythonScreen #py-head { padding: 0 1; height: auto; }
    PythonScreen #py-main { height: 1fr; min-height: 4; }
    PythonScreen #py-path { padding: 0 1; height: auto; max-height: 12; }
    PythonScreen #py-workers-head { padding: 0 1; height: auto; }
    PythonScreen #py-workers { height: auto; max-height: 10; }
    """

    def __init__(self, state: AttachState, feed: AttachFeed) -> None:
        super().__init__(state, feed)
        self._profile: PythonProfile | None = None

    def compose(self) -> ComposeResult:
        yield BannerPanel(id="py-banner")
        yield HeadPanel(id="py-head")
        yield FunctionTable(id="py-main")
        yield HeadPanel(id="py-path")
        yield HeadPanel(id="py-workers-head")
        yield FunctionTable(id="py-workers")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#py-main", FunctionTable).focus()
        super().on_mount()
        self.refresh_view(force=True)

    def redraw_view(self, force: bool) -> None:
        """A new profile (or a new reason for none) redraws the view."""
        snap = self.state.snapshot()
        live = not self.feed.is_replay
        head = self.query_one("#py-head", HeadPanel)
        text = heading_text(snap, live)
        profile = snap.python_profile
        if not force and profile is self._profile and text == head.text:
            return
        head.text = text
        head.redraw()
        self._profile = profile
        self.query_one("#py-main", FunctionTable).show(profile)
        workers = None if profile is None else profile.workers
        wtable = self.query_one("#py-workers", FunctionTable)
        wtable.show(workers)
        wtable.display = workers is not None
        whead = self.query_one("#py-workers-head", HeadPanel)
        heading = None if profile is None else workers_heading(profile)
        whead.text = Text()
        if heading is not None:
            whead.text.append(f" {heading}", style="bold" if workers is not None else "dim")
        whead.display = heading is not None
        whead.redraw()
        self._update_path()

    def _focused_table(self) -> FunctionTable:
        focused = self.focused
        if isinstance(focused, FunctionTable):
            return focused
        return self.query_one("#py-main", FunctionTable)

    def _update_path(self) -> None:
        table = self._focused_table()
        profile = self._profile
        if table.id == "py-workers" and profile is not None:
            profile = profile.workers
        panel = self.query_one("#py-path", HeadPanel)
        limit = max(3, (self.size.height or self.app.size.height) // 4)
        panel.text = path_text(profile, table.selected, limit)
        panel.redraw()

    @on(DataTable.RowHighlighted)
    def _row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        self._update_path()

    def on_descendant_focus(self) -> None:
        self._update_path()

    def action_switch(self) -> None:
        """Tab: the training thread's table / the workers' (when shown)."""
        main = self.query_one("#py-main", FunctionTable)
        workers = self.query_one("#py-workers", FunctionTable)
        target = workers if self.focused is main and workers.display else main
        target.focus()
        self._update_path()

    def action_close(self) -> None:
        self.app.pop_screen()
