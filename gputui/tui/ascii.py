"""``--ascii``: everything on screen drawn with ASCII, for terminals and fonts
without block and box characters.

gputui's own panels take ``ascii_only``; this module covers what Textual and
the shared formatting draw themselves: scrollbar thumbs (eighth blocks), the
footer's separator before the command palette key, a notice's edge, a list's
frame, and the ellipsis of a cut text.  It is process-wide, as the terminal is.
"""

from __future__ import annotations

from typing import Any, ClassVar

from textual.app import App
from textual.scrollbar import ScrollBar, ScrollBarRender

from gputui import fmt

#: borders Textual draws with block characters, in ASCII: the footer's "▏"
#: before ^p, a notice's "▌" edge, a list's half-block frame
CSS = """
App.-ascii FooterKey.-command-palette {
    border-left: none;
}
App.-ascii Toast {
    border-left: none;
    padding: 1 1 1 2;
}
App.-ascii OptionList, App.-ascii OptionList:focus {
    border: ascii $border;
}
"""


class AsciiScrollBarRender(ScrollBarRender):
    """A thumb of whole cells (its colour shows it), no partial block glyphs."""

    VERTICAL_BARS: ClassVar[list[str]] = [" "] * 8
    HORIZONTAL_BARS: ClassVar[list[str]] = [" "] * 8


def use_ascii(app: App[Any]) -> None:
    """Switch the app (and the process's text formatting) to ASCII drawing."""
    app.add_class("-ascii")
    ScrollBar.renderer = AsciiScrollBarRender
    fmt.use_ascii(True)
