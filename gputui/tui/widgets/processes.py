"""The process table: rows keyed by ``(gpu_uuid, pid)``, each rendered once per change.

Textual's DataTable re-renders every visible cell whenever any cell changes (its
render cache is keyed by a global update counter); with 40 processes whose %SM
and %CPU move every second that cost ~60 ms a frame.  This widget draws through
the line API instead: a row becomes one Strip, cached by the row's cell values,
so a refresh renders only the rows whose numbers changed and the cursor stays on
its process (found by key) wherever the sort moves it.

Only the rows in view are made into cells and lines: a node with 20,000 GPU
processes costs a sort (in C) and the few dozen rows on screen per refresh, not
20,000 rows of text.  Scrolling makes the newly visible rows as they come.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gputui.session import process_view
from gputui.session.process_sort import HOST_ORDER
from gputui.session.process_view import (
    COLUMN_KEYS,
    COLUMNS,
    LazyRows,
    ProcFilter,
    Row,
    RowBuilder,
    SortSpec,
)
from gputui.snapshot.model import PlacedMemo, ProcessSnapshot, any_in_job
from gputui.tui.widgets import process_rows
from gputui.tui.widgets.cursor_keys import CURSOR_BINDINGS, CursorKeys, scroll_to_row
from gputui.tui.widgets.plain_box import plain_box
from gputui.tui.widgets.process_rows import MIN_COMMAND, line_text, row_segments
from gputui.tui.widgets.repaint import repaint


class ProcessTable(CursorKeys, ScrollView, can_focus=True):
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "processtable--header",
        "processtable--cursor",
        "processtable--cursor-blurred",
    }
    DEFAULT_CSS = """
    ProcessTable {
        height: 1fr;
        scrollbar-size-horizontal: 0;
        & > .processtable--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        & > .processtable--cursor {
            background: $block-cursor-background;
            color: $block-cursor-foreground;
            text-style: $block-cursor-text-style;
        }
        & > .processtable--cursor-blurred {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select", "Detail", show=False),
        *CURSOR_BINDINGS,
    ]

    class HeaderSelected(Message):
        """A column header was clicked."""

        def __init__(self, column: str) -> None:
            super().__init__()
            self.column = column

    class RowSelected(Message):
        """Enter (or a click on the row under the cursor): open this row."""

        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    def __init__(self, *, id: str | None = None, ascii_only: bool = False) -> None:
        super().__init__(id=id)
        self.ascii_only = ascii_only
        self.sort_spec = SortSpec()
        self.proc_filter = ProcFilter()
        self.tree_view = False
        #: names of parent processes that are not GPU processes (tree view), by pid
        self.parent_names: dict[int, str] = {}
        self.total = 0
        self.shown = 0
        self.cursor_row = 0
        self._procs: tuple[ProcessSnapshot, ...] = ()
        self._now_s = 0.0
        self._builder = RowBuilder()
        #: whether a process is in a container, or a Slurm job, read only for
        #: processes that changed
        self._placed = PlacedMemo()
        self._in_job = PlacedMemo(any_in_job)
        self._rows = LazyRows()
        #: row key -> (process, tree prefix, parent name, time, cells): the cells of rows
        #: that were in view, made again when one of the four changes
        self._cells: dict[str, tuple[Any, str, str | None, float, tuple[Any, ...]]] = {}
        #: row key -> (cells, width, base style, cursor style, Strip): a row is rendered
        #: when it changes (the base style changes with the theme)
        self._strips: dict[str, tuple[tuple[Any, ...], int, Style, Style | None, Strip]] = {}
        self._header: tuple[tuple[Any, ...], Strip] | None = None
        self._shown: list[str] = []
        self._widths: list[int] = []
        #: indices of the shown columns in COLUMNS
        self._indices: list[int] = []
        #: where the TIME cell is among the shown cells (None: not shown)
        self._time_at: int | None = None
        #: the first row in view and, per line in view, what it showed at the last
        #: refresh: (key, cells, under the cursor)
        self._painted: tuple[int, list[tuple[str, tuple[Any, ...], bool]]] = (0, [])
        #: the processes and width the columns were last chosen for, and those columns
        self._columns_for: tuple[tuple[ProcessSnapshot, ...], int, list[str]] | None = None
        #: the widget's own style ("") and its components' styles, as last looked up:
        #: Textual works each out again from the ancestors' styles whenever the
        #: widget is refreshed (every second), though they change only with the CSS
        #: (a theme, a class, hover) or the focus
        self._styles: dict[str, Style] = {}
        #: the last lines came from the table's own drawing (Textual's cache is stale)
        self._drew_plain = False
        #: told the pids of the GPU processes in view when they change (a live
        #: collector reads those at every refresh, the others in turns)
        self.on_view: Callable[[frozenset[int]], None] | None = None
        self._told: frozenset[int] | None = None
        #: the rows, and the first and end row in view, when the pids were last told
        self._told_view: tuple[object, int, int] | None = None
        #: the size while the rows are refreshed (None otherwise)
        self._size_now: Size | None = None
        #: told whether the rows are sorted by a host value (%CPU, HOST-MEM), when
        #: that changes: the collector then reads the processes off screen more often
        self.on_host_order: Callable[[bool], None] | None = None
        self._told_host: bool | None = None

    # -- what the screen calls -------------------------------------------------

    def show(self, procs: tuple[ProcessSnapshot, ...], now_s: float) -> None:
        self._procs = procs
        self._now_s = now_s
        self.refresh_rows()

    def set_sort(self, spec: SortSpec) -> None:
        self.sort_spec = spec
        self._header = None
        self.refresh_rows()
        self.refresh(Region(0, 0, self.size.width, 1))  # the header's sort arrow

    def set_filter(self, flt: ProcFilter) -> None:
        self.proc_filter = flt
        self.refresh_rows()

    def set_tree(self, tree: bool) -> None:
        self.tree_view = tree
        self.refresh_rows()

    @property
    def selected_row(self) -> Row | None:
        if not self._rows:
            return None
        return self._rows[min(self.cursor_row, len(self._rows) - 1)]

    @property
    def selected_process(self) -> ProcessSnapshot | None:
        row = self.selected_row
        return row.proc if row else None

    def select_key(self, key: str) -> bool:
        index = self._rows.find(key)
        if index is None:
            return False
        self.move_cursor(index)
        return True

    def row(self, key: str) -> Row | None:
        index = self._rows.find(key)
        return None if index is None else self._rows[index]

    @property
    def order(self) -> list[str]:
        """Row keys top to bottom (tests read this)."""
        return [row.key for row in self._rows]

    @property
    def column_keys(self) -> list[str]:
        """The columns shown now (narrow terminals show fewer)."""
        return list(self._shown)

    def cell(self, key: str, column: str) -> Any:
        index = self._rows.find(key)
        if index is None:
            raise KeyError(key)
        return self._row_cells(index)[1][self._shown.index(column)]

    def column_x(self, column: str) -> int:
        """Where a column's header starts (for clicks)."""
        self._layout_columns()
        return sum(w + 1 for w in self._widths[: self._shown.index(column)])

    def missing_parent_pids(self) -> list[int]:
        return [row.pid for row in self._rows.parents() if row.pid not in self.parent_names]

    # -- the update ------------------------------------------------------------

    def _sized(self) -> Size:
        """The table's size: looked up once per refresh of the rows (Textual works
        it out from the screen's layout at every call)."""
        return self._size_now or self.size

    def refresh_rows(self) -> None:
        self._size_now = self.size
        try:
            self._refresh_rows()
        finally:
            self._size_now = None

    def _refresh_rows(self) -> None:
        relaid = self._layout_columns()
        selected = self.selected_row
        before_cursor, before_top = self.cursor_row, self.scroll_offset.y
        rows = self._builder.build(
            self._procs,
            self.sort_spec,
            self.proc_filter,
            self.tree_view,
            self._now_s,
            self.ascii_only,
        )
        self._rows = rows
        self.total = len(self._procs)
        # GPU processes shown: a tree's parent rows are not GPU processes
        self.shown = rows.process_count
        found = rows.find(selected.key) if selected is not None else None
        if found is not None:
            self.cursor_row = found
        else:
            self.cursor_row = max(0, min(self.cursor_row, len(rows) - 1))
        self.virtual_size = Size(self._sized().width, len(rows) + 1)
        top = self._top_after(before_cursor, before_top, found)
        if top != before_top:
            self.scroll_to(y=top, animate=False, immediate=True)
            top = self.scroll_offset.y
        painted = self._visible(top)
        # Rows that left the view take their cells and lines with them (bounded caches).
        keep = {key for key, _cells, _cursor in painted}
        for cache in (self._cells, self._strips):
            for key in [k for k in cache if k not in keep]:
                del cache[key]
        if relaid or top != self._painted[0]:
            self.refresh()
        else:
            self._refresh_changed(self._painted[1], painted)
        self._painted = (top, painted)
        self._tell_view()

    def _tell_view(self) -> None:
        """Say which GPU processes are in view, and whether the rows are sorted
        by a host value, if that changed."""
        host = self.sort_spec.column in HOST_ORDER
        if self.on_host_order is not None and host != self._told_host:
            self._told_host = host
            self.on_host_order(host)
        if self.on_view is None:
            return
        top = self.scroll_offset.y
        end = min(len(self._rows), top + max(0, self._sized().height - 1))
        told = self._told_view
        if told is not None and told[0] is self._rows and told[1:] == (top, end):
            return  # the same rows in the same place: the same pids (drawing asks often)
        self._told_view = (self._rows, top, end)
        pids = frozenset(row.pid for row in self._rows[top:end] if row.proc is not None)
        if pids != self._told:
            self._told = pids
            self.on_view(pids)

    def _top_after(self, cursor: int, top: int, found: int | None) -> int:
        """The first row in view after a refresh: where it was, unless the selected
        process moved out of view; then the view follows it, keeping it on its line."""
        visible = max(1, self._sized().height - 1)
        if found is None or not top <= cursor < top + visible:
            return top
        if top <= found < top + visible:
            return top
        return max(0, found - (cursor - top))

    def _visible(self, top: int) -> list[tuple[str, tuple[Any, ...], bool]]:
        """What each line in view shows: (row key, cells, under the cursor)."""
        end = min(len(self._rows), top + max(0, self._sized().height - 1))
        out = []
        for index in range(top, end):
            key, values = self._row_cells(index)
            out.append((key, values, index == self.cursor_row))
        return out

    def _row_cells(self, index: int) -> tuple[str, tuple[Any, ...]]:
        """Row ``index``'s key and its cells in the shown columns (made again only
        when its process, tree prefix or parent name changed; the clock makes its
        TIME cell again)."""
        row = self._rows[index]
        proc = row.proc
        name = self.parent_names.get(row.pid) if proc is None else None
        now = self._now_s
        cached = self._cells.get(row.key)
        if (
            cached is not None
            and cached[0] is proc
            and cached[1] == row.prefix
            and cached[2] == name
        ):
            if cached[3] == now:
                return row.key, cached[4]
            # Only the clock moved (every refresh): the TIME cell is the one that
            # follows it; the row stays the same tuple while its text does not change.
            at = self._time_at
            if proc is None or at is None:
                self._cells[row.key] = (proc, row.prefix, name, now, cached[4])
                return row.key, cached[4]
            values = cached[4]
            if process_view.time_text(proc, now) != values[at].plain:
                values = (*values[:at], process_rows.time_cell(proc, now), *values[at + 1 :])
            self._cells[row.key] = (proc, row.prefix, name, now, values)
            return row.key, values
        every = process_rows.cells(row, now, self.ascii_only, name)
        values = tuple(every[i] for i in self._indices)
        self._cells[row.key] = (proc, row.prefix, name, now, values)
        return row.key, values

    def _refresh_changed(
        self,
        before: list[tuple[str, tuple[Any, ...], bool]],
        after: list[tuple[str, tuple[Any, ...], bool]],
    ) -> None:
        # Only the lines whose row changed are repainted: with most rows steady from one
        # sample to the next, the compositor then renders a few lines, not the table.
        width = self._sized().width
        changed = []
        for line in range(max(len(before), len(after))):
            old = before[line] if line < len(before) else None
            new = after[line] if line < len(after) else None
            if old != new:
                changed.append(Region(0, line + 1, width, 1))
        if changed:  # one call: the screen is told once
            repaint(self, *changed)

    def _layout_columns(self) -> bool:
        """Fit the columns to the width; True when they changed (all rows redraw)."""
        width = self._sized().width or self.app.size.width
        known = self._columns_for
        if known is not None and known[0] is self._procs and known[1] == width:
            shown = known[2]
        else:  # a pass over every process: once per refresh
            shown = process_view.shown_columns(width, self._procs, self._placed, self._in_job)
            self._columns_for = (self._procs, width, shown)
        fixed = [w or 0 for k, _l, w in COLUMNS if k in shown]
        # The command takes what the fixed columns leave (one space between columns).
        command = max(MIN_COMMAND, width - sum(fixed[:-1]) - (len(shown) - 1))
        widths = [*fixed[:-1], command]
        if shown != self._shown or widths != self._widths:
            self._shown = shown
            self._widths = widths
            self._indices = [COLUMN_KEYS.index(k) for k in shown]
            self._time_at = shown.index("time") if "time" in shown else None
            self._strips.clear()
            self._header = None
            self._cells = {}  # made again with the new column set
            return True
        return False

    def on_resize(self, _event: events.Resize) -> None:
        before = (list(self._shown), list(self._widths))
        self._layout_columns()
        if (self._shown, self._widths) != before:
            self.refresh_rows()
        self.refresh()

    # -- drawing ---------------------------------------------------------------

    def _line(self, values: tuple[Any, ...], style: Style | None) -> Text:
        return line_text(self._shown, values, self._widths, style, self.ascii_only)

    def _strip(self, text: Text, width: int, base: Style) -> Strip:
        segments = list(text.render(self.app.console))
        return Strip(Segment.apply_style(segments, base)).adjust_cell_length(width, base)

    def _style(self, component: str = "") -> Style:
        """The widget's style, or a component's, looked up once per change of the CSS
        or the focus: walking the ancestors' styles cost more than drawing a row."""
        style = self._styles.get(component)
        if style is None:
            style = self.get_component_rich_style(component) if component else self.rich_style
            self._styles[component] = style
        return style

    def notify_style_update(self) -> None:
        self._styles.clear()
        super().notify_style_update()

    def render_lines(self, crop: Region) -> list[Strip]:
        self._tell_view()  # scrolled, resized
        box = plain_box(self)
        if box is None or box.left or box.right:
            if self._drew_plain:  # Textual's cache missed what was drawn meanwhile
                self._styles_cache.clear()
                self._drew_plain = False
            return super().render_lines(crop)
        # The rows as they are (each cached until its values change), the app's
        # filters applied: what Textual's styles cache makes of a box without
        # border or padding (tests/tui/test_text_panel_lines.py).
        self._drew_plain = True
        width, height = self.outer_size
        filters = self.get_line_filters()
        strips: list[Strip] = []
        for y in crop.line_range:
            strip = self.render_line(y) if y < height else Strip.blank(width, box.blank)
            if strip.cell_length != width:
                strip = strip.adjust_cell_length(width, box.blank)
            for line_filter in filters:
                strip = strip.apply_filter(line_filter, box.background)
            strips.append(strip)
        if crop.column_span != (0, width):
            x1, x2 = crop.column_span
            strips = [strip.crop(x1, x2) for strip in strips]
        return strips

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self._style()
        if y == 0:
            return self._header_strip(width, base)
        index = self.scroll_offset.y + y - 1
        if index >= len(self._rows):
            return Strip.blank(width, base)
        key, values = self._row_cells(index)
        cursor: Style | None = None
        if index == self.cursor_row:
            name = "processtable--cursor" if self.has_focus else "processtable--cursor-blurred"
            cursor = self._style(name)
        cached = self._strips.get(key)
        if (
            cached is not None
            and cached[0] == values
            and cached[1] == width
            and cached[2] == base
            and cached[3] == cursor
        ):
            return cached[4]
        segments = row_segments(
            self._shown, values, self._widths, cursor, self.ascii_only, self.app.console.get_style
        )
        if segments is None:  # a cell Rich must lay out (wide characters, spans)
            strip = self._strip(self._line(values, cursor), width, base)
        else:
            strip = Strip(Segment.apply_style(segments, base)).adjust_cell_length(width, base)
        self._strips[key] = (values, width, base, cursor, strip)
        return strip

    def _header_strip(self, width: int, base: Style) -> Strip:
        style = self._style("processtable--header")
        spec = self.sort_spec
        labels: list[Any] = []
        for key, label, _w in COLUMNS:
            if key not in self._shown:
                continue
            if key == spec.column:
                up, down = ("^", "v") if self.ascii_only else ("▲", "▼")
                labels.append(Text(label + (down if spec.descending else up), style="underline"))
            else:
                labels.append(label)
        cache_key = (*labels, width, style)
        if self._header is not None and self._header[0] == cache_key:
            return self._header[1]
        text = self._line(tuple(labels), None)
        strip = self._strip(text, width, base + style)
        self._header = (cache_key, strip)
        return strip

    def on_focus(self) -> None:
        self._styles.clear()
        self.refresh()

    def on_blur(self) -> None:
        self._styles.clear()
        self.refresh()

    # -- cursor and mouse ----------------------------------------------------------

    def move_cursor(self, row: int, scroll: bool = True) -> None:
        if not self._rows:
            self.cursor_row = 0
            return
        self.cursor_row = max(0, min(row, len(self._rows) - 1))
        if scroll:
            scroll_to_row(self, self.cursor_row, self.size.height)
        self.refresh()

    def cursor_place(self) -> tuple[int, int, int]:
        return self.cursor_row, len(self._rows), self.size.height

    def action_select(self) -> None:
        row = self.selected_row
        if row is not None:
            self.post_message(self.RowSelected(row.key))

    def on_click(self, event: events.Click) -> None:
        if event.y == 0:
            x = 0
            for column, width in zip(self._shown, self._widths, strict=True):
                if x <= event.x < x + width + 1:
                    self.post_message(self.HeaderSelected(column))
                    break
                x += width + 1
            return
        index = self.scroll_offset.y + event.y - 1
        if 0 <= index < len(self._rows):
            if index == self.cursor_row:
                self.action_select()
            else:
                self.move_cursor(index, scroll=False)
