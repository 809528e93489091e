"""The keys that move a list's cursor, the same in every list gputui shows."""

from __future__ import annotations

from textual.binding import Binding, BindingType
from textual.scroll_view import ScrollView

#: a row up or down, a page up or down, the first or the last row: the widget
#: answers with ``action_cursor(step)``, ``action_page(step)`` and
#: ``action_edge(step)`` (a negative step goes up)
CURSOR_BINDINGS: tuple[BindingType, ...] = (
    Binding("up", "cursor(-1)", "Up", show=False),
    Binding("down", "cursor(1)", "Down", show=False),
    Binding("pageup", "page(-1)", "Page up", show=False),
    Binding("pagedown", "page(1)", "Page down", show=False),
    Binding("home", "edge(-1)", "Top", show=False),
    Binding("end", "edge(1)", "Bottom", show=False),
)


class CursorKeys:
    """The answers to :data:`CURSOR_BINDINGS` of a list drawn under a one-line
    header, from where its cursor is and how many rows and lines it has
    (:meth:`cursor_place`); the widget moves its cursor (:meth:`move_cursor`)."""

    def cursor_place(self) -> tuple[int, int, int]:
        """The cursor's row, the rows, and the lines shown (the header's among them)."""
        raise NotImplementedError

    def move_cursor(self, index: int) -> None:
        raise NotImplementedError

    def action_cursor(self, step: int) -> None:
        self.move_cursor(self.cursor_place()[0] + step)

    def action_page(self, step: int) -> None:
        cursor, _, lines = self.cursor_place()
        self.move_cursor(cursor + step * max(1, lines - 2))

    def action_edge(self, step: int) -> None:
        self.move_cursor(0 if step < 0 else self.cursor_place()[1] - 1)


def scroll_to_row(view: ScrollView, index: int, lines: int) -> None:
    """Scroll ``view`` (``lines`` lines high, a header over its rows) as little as
    it takes to show row ``index``."""
    top = int(view.scroll_offset.y)
    rows = max(1, lines - 1)  # under the header
    if index < top:
        view.scroll_to(y=index, animate=False)
    elif index >= top + rows:
        view.scroll_to(y=index - rows + 1, animate=False)
