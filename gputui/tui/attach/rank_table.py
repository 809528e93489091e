"""The rank view's table: one line per rank, sortable, with a cursor.

Drawn as a :class:`TextPanel` (one Rich Text, each line rendered once per
change) rather than a DataTable: every cell of every rank changes each second,
and a DataTable re-renders all of its cells for any update, which cost several
times the rest of the view at 8 ranks.  The screen moves the cursor (up/down)
and opens the rank under it (Enter or a click).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual import events
from textual.message import Message

from gputui import fmt
from gputui.session.rank_view import EXITED, STALLED, RankRow
from gputui.tui.attach.phases import phase_style
from gputui.tui.widgets.text_panel import TextPanel

PHASE_BAR = 16
#: the NOW column gives the time in the current phase from this long on
NOW_SHOWN_S = 1.0

#: (key, header, width, right-aligned, sort key or None); the columns that tell
#: ranks apart come first, so that 80 columns show them
COLUMNS: tuple[tuple[str, str, int, bool, Callable[[RankRow], Any] | None], ...] = (
    ("rank", "RANK", 5, True, lambda r: (r.rank if r.rank is not None else 1 << 30, r.pid)),
    ("state", "STATE", 8, False, lambda r: r.state),
    ("p50", "P50", 7, True, lambda r: r.step_p50_s or 0.0),
    ("comm", "COMM", 12, True, lambda r: r.comm_s or 0.0),
    ("compute", "COMPUTE", 8, True, lambda r: r.compute_s or 0.0),
    ("behind", "BEHIND", 6, True, lambda r: -1 if r.behind is None else r.behind),
    ("phases", "PHASES", PHASE_BAR, False, None),
    ("now", "NOW", 14, False, lambda r: r.phase_now_s or 0.0),
    ("p90", "P90", 7, True, lambda r: r.step_p90_s or 0.0),
    ("step", "STEP", 7, True, lambda r: -1 if r.last_step is None else r.last_step),
    ("mem", "MEM", 7, True, lambda r: r.mem_allocated_bytes or 0),
    ("gpu", "GPU", 14, False, lambda r: r.gpu_util_pct or 0.0),
    ("pid", "PID", 8, True, lambda r: r.pid),
)
SORTABLE = [key for key, _h, _w, _r, sort in COLUMNS if sort is not None]


def phase_bar(row: RankRow, width: int, ascii_only: bool) -> Text:
    """The rank's wall time split by phase, as one bar (a letter per phase in
    ASCII mode)."""
    text = Text()
    shares = [(name, share) for name, share in row.phase_shares if share > 0]
    if not shares:
        return Text("-".ljust(width), style="dim")
    order = [name for name, _s in shares]
    used = 0
    for k, (name, share) in enumerate(shares):
        cells = width - used if k == len(shares) - 1 else round(share * width)
        cells = max(0, min(cells, width - used))
        if not cells:
            continue
        fill = (name[:1] or "?") if ascii_only else "█"
        text.append(fill * cells, style=phase_style(name, order))
        used += cells
    return text


def cells(row: RankRow, ascii_only: bool) -> dict[str, Text]:
    """A rank's cells, by column key."""
    state_style = {EXITED: "bold red", STALLED: "bold yellow"}.get(row.state, "green")
    comm = "-"
    if row.comm_s is not None:
        comm = fmt.ms(row.comm_s)
        if row.comm_share is not None:
            comm += f" {row.comm_share * 100:3.0f}%"
    gpu = "-"
    if row.gpu_util_pct is not None:
        gpu = f"{row.gpu_util_pct:.0f}%"
        if row.gpu_sm_clock_mhz:
            gpu += f" {row.gpu_sm_clock_mhz:.0f}MHz"
        if row.gpu_throttle:
            gpu += "!"
    elif row.gpu_uuid:
        gpu = fmt.middle(fmt.clean(row.gpu_uuid, 64), 14, ascii_only)
    now = "-"
    if row.phase_now is not None:
        # Where it is right now flickers between phases; how long matters once
        # it is seconds (a rank stuck, or waiting for one).
        now = fmt.clean(row.phase_now, 24)
        if row.phase_now_s is not None and row.phase_now_s >= NOW_SHOWN_S:
            now += f" {fmt.duration(row.phase_now_s)}"
    return {
        "rank": Text("-" if row.rank is None else str(row.rank)),
        "state": Text(row.state, style=state_style),
        "p50": Text(fmt.ms(row.step_p50_s)),
        "comm": Text(comm),
        "compute": Text(fmt.ms(row.compute_s)),
        "behind": Text(
            "-" if row.behind is None else str(row.behind),
            style="bold yellow" if row.behind else "",
        ),
        "phases": phase_bar(row, PHASE_BAR, ascii_only),
        "now": Text(now),
        "p90": Text(fmt.ms(row.step_p90_s)),
        "step": Text("-" if row.last_step is None else str(row.last_step)),
        "mem": Text(fmt.size(row.mem_allocated_bytes) if row.mem_allocated_bytes else "-"),
        "gpu": Text(gpu),
        "pid": Text(str(row.pid)),
    }


def _fit(cell: Text, width: int, right: bool) -> Text:
    cell = cell.copy()
    cell.truncate(width, overflow="ellipsis")
    pad = width - cell.cell_len
    if pad > 0:
        if right:
            cell = Text(" " * pad) + cell
        else:
            cell.append(" " * pad)
    return cell


class RankTable(TextPanel):
    """The ranks, sorted, with a cursor row (its pid is ``selected``)."""

    DEFAULT_CSS = """
    RankTable { height: auto; }
    """

    class Selected(Message):
        """A rank was opened (Enter, or a click on its line)."""

        def __init__(self, pid: int) -> None:
            super().__init__()
            self.pid = pid

    def __init__(self, *, id: str | None = None, ascii_only: bool = False) -> None:
        super().__init__(id=id)
        self.ascii_only = ascii_only
        self.rows: list[RankRow] = []
        self.sort_key = "rank"
        self.sort_reverse = False
        self.selected: int | None = None  # pid under the cursor

    @property
    def order(self) -> list[int]:
        return [r.pid for r in self.rows]

    def show(self, rows: tuple[RankRow, ...]) -> None:
        sort = next(s for key, _h, _w, _r, s in COLUMNS if key == self.sort_key)
        assert sort is not None
        self.rows = sorted(rows, key=sort, reverse=self.sort_reverse)
        if self.selected not in self.order:
            self.selected = self.rows[0].pid if self.rows else None
        self.redraw()

    def move(self, delta: int) -> None:
        order = self.order
        if not order:
            return
        index = order.index(self.selected) if self.selected in order else 0
        self.selected = order[max(0, min(len(order) - 1, index + delta))]
        self.redraw()

    def build(self, width: int) -> Text:
        header = Text(style="bold")
        for key, title, col_width, right, _sort in COLUMNS:
            mark = ("▼" if self.sort_reverse else "▲") if key == self.sort_key else ""
            if self.ascii_only and mark:
                mark = "v" if self.sort_reverse else "^"
            header.append_text(_fit(Text(title + mark), col_width, right))
            header.append(" ")
        header.stylize("reverse dim")
        lines = [header]
        for row in self.rows:
            line = Text()
            values = cells(row, self.ascii_only)
            for key, _title, col_width, right, _sort in COLUMNS:
                line.append_text(_fit(values[key], col_width, right))
                line.append(" ")
            if row.pid == self.selected:
                line.stylize("bold on grey23")
            lines.append(line)
        if not self.rows:
            lines.append(Text(" connecting to the ranks...", style="dim"))
        return Text("\n").join(lines)

    def on_click(self, event: events.Click) -> None:
        index = event.y - 1  # below the header
        if 0 <= index < len(self.rows):
            pid = self.rows[index].pid
            if pid == self.selected:
                self.post_message(self.Selected(pid))
            self.selected = pid
            self.redraw()
