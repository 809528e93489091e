"""Whether a widget's box is its content alone, for widgets that draw their own
lines instead of going through Textual's styles cache.

Textual's styles cache builds every line it draws again through the whole box
model (border, outline, padding, tint, hatch, opacity), and works the background
out from the widget's ancestors at every call.  A widget whose box has none of
those (a side padding aside) can hand over its own lines with the app's line
filters applied: the same strips (``tests/tui/test_text_panel_lines.py``).
"""

from __future__ import annotations

from typing import NamedTuple

from rich.style import Style
from textual.color import Color
from textual.style import Style as TextualStyle
from textual.widget import Widget

try:  # Textual's own padding of a line (what its styles cache does)
    from textual._segment_tools import line_pad
except ImportError:  # a Textual without it: widgets keep Textual's drawing
    line_pad = None  # type: ignore[assignment]

__all__ = ["PlainBox", "line_pad", "plain_box"]


class PlainBox(NamedTuple):
    #: the side padding
    left: int
    right: int
    #: the background the app's line filters see
    background: Color
    #: the style of blank cells (the widget's background over its parent's)
    blank: Style


def plain_box(widget: Widget) -> PlainBox | None:
    """``widget``'s plain box, or None where its box is more than its content and
    a side padding (a border, an outline, a top or bottom padding, a tint, a
    hatch, an opacity below 1 anywhere up its ancestors, a border title) or where
    this Textual lacks what the check reads.  Worked out again whenever a style
    of the widget or of an ancestor changes (each one's style key)."""
    if line_pad is None:
        return None
    try:
        key = tuple(node.styles._cache_key for node in widget.ancestors_with_self)
    except AttributeError:  # a Textual whose styles hold no cache key
        return None
    memo: tuple[tuple[int, ...], PlainBox | None] | None = getattr(widget, "_gputui_box", None)
    if memo is not None and memo[0] == key:
        return memo[1]
    styles = widget.styles
    top, right, bottom, left = styles.padding
    plain = (
        not any(edge for edge, _color in styles.border)
        and not any(edge for edge, _color in styles.outline)
        and not top
        and not bottom
        and getattr(widget, "_border_title", None) is None
        and getattr(widget, "_border_subtitle", None) is None
        and not styles.tint.a
        and styles.text_opacity == 1.0
        and widget.opacity == 1.0
        and not (styles.has_rule("hatch") and styles.hatch != "none")
    )
    box = None
    if plain:
        base_background, background = widget.background_colors
        blank = TextualStyle(background=base_background + background).rich_style
        box = PlainBox(left, right, background, blank)
    widget._gputui_box = (key, box)  # type: ignore[attr-defined]
    return box
