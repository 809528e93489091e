"""The keys that move a list's cursor, the same in every list gputui shows."""

from __future__ import annotations

from textual.binding import Binding, BindingType

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
