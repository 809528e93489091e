"""A keyed table for many rows whose values change at every refresh.

Textual's DataTable keys all of its render caches on one update counter, so
changing one cell re-renders every visible cell of the table: on a 64-node
cluster that was most of the viewer's CPU.  Here each row is one Rich ``Text``
rendered into a ``Strip`` once per change of that row; scrolling and the cursor
reuse the cached strips.  Columns have fixed widths (nothing re-measures).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.text import Text
from textual import events
from textual.binding import BindingType
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gputui.tui.widgets.cursor_keys import CURSOR_BINDINGS, CursorKeys, scroll_to_row

#: a row: its key, and its cells
KeyedRow = tuple[str, tuple[Text, ...]]
Columns = Sequence[tuple[str, int]]


def row_text(cells: Sequence[Text], columns: Columns) -> Text:
    """The cells side by side, each cut or padded to its column (right-justified
    cells padded on the left), one space between columns."""
    line = Text(" ", end="", no_wrap=True)
    for cell, (_, width) in zip(cells, columns, strict=False):
        piece = cell.copy()
        piece.truncate(width, overflow="ellipsis")
        pad = width - piece.cell_len
        if pad > 0:
            if cell.justify == "right":
                piece = Text(" " * pad) + piece
            else:
                piece.append(" " * pad)
        line.append_text(piece)
        line.append(" ")
    return line


def header_text(columns: Columns) -> Text:
    return row_text([Text(label, style="bold") for label, _ in columns], columns)


class KeyedTable(CursorKeys, ScrollView, can_focus=True):
    DEFAULT_CSS = """
    KeyedTable {
        height: 1fr;
        overflow-x: hidden;
    }
    KeyedTable > .keyedtable--header {
        background: $panel;
        text-style: bold;
    }
    KeyedTable > .keyedtable--cursor {
        background: $primary 30%;
    }
    KeyedTable:focus > .keyedtable--cursor {
        background: $primary;
    }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {"keyedtable--cursor", "keyedtable--header"}
    BINDINGS: ClassVar[list[BindingType]] = [*CURSOR_BINDINGS]

    class Highlighted(Message):
        def __init__(self, table: KeyedTable, key: str) -> None:
            super().__init__()
            self.table = table
            self.key = key

        @property
        def control(self) -> KeyedTable:
            return self.table

    def __init__(self, columns: Columns, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.columns = tuple(columns)
        self.line_width = sum(w + 1 for _, w in self.columns) + 1
        self.keys: list[str] = []
        self.texts: dict[str, Text] = {}
        self._cells: dict[str, tuple[Text, ...]] = {}
        self._strips: dict[tuple[str, bool], Strip] = {}
        self.cursor = 0
        self._header: Strip | None = None
        #: rows rendered into strips since the start (what a change costs)
        self.renders = 0

    def on_mount(self) -> None:
        self.virtual_size = Size(self.line_width, 1)  # the header, before any row

    # -- data -----------------------------------------------------------------------------
    @property
    def cursor_key(self) -> str | None:
        return self.keys[self.cursor] if 0 <= self.cursor < len(self.keys) else None

    def set_rows(self, rows: Sequence[KeyedRow]) -> None:
        """Show ``rows``; the cursor stays on its key when that row is still there."""
        old_key = self.cursor_key
        keys = [key for key, _ in rows]
        changed = False
        for key, cells in rows:
            if self._cells.get(key) != cells:
                self._cells[key] = cells
                self.texts[key] = row_text(cells, self.columns)
                self._strips.pop((key, False), None)
                self._strips.pop((key, True), None)
                changed = True
        if keys != self.keys:
            gone = set(self.keys) - set(keys)
            for key in gone:
                self._cells.pop(key, None)
                self.texts.pop(key, None)
                self._strips.pop((key, False), None)
                self._strips.pop((key, True), None)
            self.keys = keys
            self.virtual_size = Size(self.line_width, len(keys) + 1)  # + the header
            changed = True
        if old_key in keys:
            self.cursor = keys.index(old_key)  # type: ignore[arg-type]
        else:
            self.cursor = min(self.cursor, max(0, len(keys) - 1))
        if changed:
            self.refresh()
        if self.cursor_key is not None and self.cursor_key != old_key:
            self.post_message(self.Highlighted(self, self.cursor_key))

    # -- moving -----------------------------------------------------------------------------
    def move_cursor(self, index: int) -> None:
        if not self.keys:
            return
        index = max(0, min(len(self.keys) - 1, index))
        if index == self.cursor:
            return
        for key in (self.cursor_key, self.keys[index]):
            self._strips.pop((key or "", True), None)
            self._strips.pop((key or "", False), None)
        self.cursor = index
        scroll_to_row(self, index, self.scrollable_content_region.height)
        self.refresh()
        self.post_message(self.Highlighted(self, self.keys[index]))

    def cursor_place(self) -> tuple[int, int, int]:
        return self.cursor, len(self.keys), self.scrollable_content_region.height

    def on_click(self, event: events.Click) -> None:
        if event.y >= 1:  # not the header
            self.move_cursor(int(self.scroll_offset.y) + event.y - 1)

    # -- drawing ----------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        if y == 0:  # the header stays put while the rows scroll under it
            if self._header is None:
                segments = list(header_text(self.columns).render(self.app.console))
                self._header = (
                    Strip(segments)
                    .extend_cell_length(self.line_width)
                    .apply_style(self.get_component_rich_style("keyedtable--header"))
                    .apply_style(self.rich_style)
                )
            return self._header.crop(0, width)
        index = int(self.scroll_offset.y) + y - 1
        if not 0 <= index < len(self.keys):
            return Strip.blank(width, self.rich_style)
        key = self.keys[index]
        is_cursor = index == self.cursor
        strip = self._strips.get((key, is_cursor))
        if strip is None:
            self.renders += 1
            text = self.texts[key]
            segments = list(text.render(self.app.console))
            strip = Strip(segments).extend_cell_length(self.line_width)
            # styles apply underneath: the cursor's first, so it wins over the background
            if is_cursor:
                strip = strip.apply_style(self.get_component_rich_style("keyedtable--cursor"))
            strip = strip.apply_style(self.rich_style)
            self._strips[(key, is_cursor)] = strip
        return strip.crop(0, width) if width < strip.cell_length else strip

    def row_plain(self, index: int) -> str:
        """A row's text (tests and screenshots)."""
        return self.texts[self.keys[index]].plain
