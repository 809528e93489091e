"""A panel drawn as one Rich Text, redrawn only when its text changes.

Each refresh builds a Text from plain values; when it equals what is on screen
nothing is repainted, and when only the content (not the line count) changes,
only the changed lines are repainted, without a layout pass.
"""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.geometry import Region
from textual.widget import Widget


class TextPanel(Widget):
    DEFAULT_CSS = """
    TextPanel {
        height: auto;
        text-wrap: nowrap;
        text-overflow: clip;
    }
    TextPanel.-wrap {
        text-wrap: wrap;
    }
    """

    #: wrap long lines (the line count then depends on the width: always relayout)
    WRAP = False

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        if self.WRAP:
            self.add_class("-wrap")
        self._text = Text()
        #: the text's plain lines as drawn: a redraw repaints the ones that differ
        self._lines: list[str] = [""]

    def build(self, width: int) -> Text:
        """The panel's text at ``width`` cells; subclasses draw their last data."""
        return Text()

    def redraw(self) -> None:
        width = self.content_region.width or self.app.size.width
        text = self.build(width)
        text.no_wrap = not self.WRAP
        text.overflow = "fold" if self.WRAP else "crop"
        if text == self._text:
            return
        lines = text.plain.split("\n")
        if self.WRAP or len(lines) != len(self._lines):
            self.refresh(layout=True)
        else:
            # Same line count: repaint only the lines that changed (one region from the
            # first to the last), so that a panel whose title or idle rows stay put
            # costs the compositor only its moving lines.  Lines are compared as plain
            # text (splitting the styled text costs more than it saves); when only
            # styles changed, every line is repainted.
            changed = [
                y for y, (old, new) in enumerate(zip(self._lines, lines, strict=True)) if old != new
            ] or [0, len(lines) - 1]
            first, last = changed[0], changed[-1]
            self.refresh(Region(0, first, self.content_region.width, last - first + 1))
        self._text = text
        self._lines = lines

    def render(self) -> Text:
        return self._text

    def on_resize(self, _event: events.Resize) -> None:
        self.redraw()

    @property
    def plain(self) -> str:
        """What the panel shows, as plain text (tests read this)."""
        return self._text.plain
