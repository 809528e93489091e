"""A panel drawn from one Rich Text, each line rendered to a Strip once per change.

Each refresh builds a Text from plain values; when it equals what is on screen
nothing is repainted.  Otherwise the Text is split into lines and only the lines
that differ are repainted (without a layout pass while the line count holds).
A panel that makes its text a line at a time hands the lines over instead
(``build_lines``): the same lines, without a join and a split at every refresh.

The lines are drawn through the line API: a line becomes one Strip, rendered by
Rich and cached until that line's text, the width or the widget's style changes.
Textual's own path (Text -> Content -> strips) renders every line of the panel
whenever any of it is dirty and attaches the offset metadata that mouse text
selection needs; for panels that change every frame that was 30-45% of the main
thread, about twice what this costs.  The price is that text in these panels
cannot be selected with the mouse; a panel users copy from sets ``SELECTABLE``
and keeps Textual's path.

A panel whose box is its content and at most a side padding (no border, outline,
top or bottom padding, tint, hatch or opacity: all of the monitor's panels) also
skips Textual's styles cache, which builds each drawn line again through the
whole box model: a changed line becomes one strip, padding included, and the
app's line filters are applied to it (``render_lines``, :mod:`.plain_box`;
``tests/tui/test_text_panel_lines.py`` holds it to Textual's drawing of the same
panel).
"""

from __future__ import annotations

from typing import ClassVar

from rich.cells import cell_len
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.filter import LineFilter
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget

from gputui.tui.render import ascii_text
from gputui.tui.widgets.plain_box import PlainBox, line_pad, plain_box
from gputui.tui.widgets.repaint import repaint

#: how many recently drawn lines a panel keeps the strips of, whatever their place
RECENT_LINES = 16


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
    #: keep Textual's rendering (slower, but mouse selection works): for panels that
    #: users copy from
    SELECTABLE: ClassVar[bool] = False

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        if self.WRAP:
            self.add_class("-wrap")
        #: the text as built; None while it is the lines a panel made (``whole_text`` joins them)
        self._text: Text | None = Text()
        #: the lines on screen are the ones a panel made (``build_lines``)
        self._made_lines = False
        #: the text's lines as drawn (wrapped at ``_wrap_width`` when WRAP)
        self._lines: list[Text] = [Text()]
        self._wrap_width = 0
        #: the text's own style as built, and as drawn under each line
        self._text_style: str | Style = ""
        self._rich_text_style = Style.null()
        #: per line: (width, base style, the line drawn, Strip), or None until drawn
        self._strips: list[tuple[int, Style, Text, Strip] | None] = [None]
        #: per line of a plain box: (the line drawn, what else it was drawn with, Strip)
        self._plain: dict[int, tuple[Text | None, tuple[object, ...], Strip]] = {}
        #: the strips of the lines drawn last, by their text, spans and style (what
        #: else they were drawn with first): the oldest goes past RECENT_LINES
        self._recent: tuple[object, dict[tuple[object, ...], Strip]] = (None, {})
        #: the panel's style as last drawn, and its sum with each style under it
        self._styled: tuple[Style | None, dict[Style | None, Style]] = (None, {})
        #: the last lines came from the fast path (Textual's styles cache is stale)
        self._drew_plain = False

    def build(self, width: int) -> Text:
        """The panel's text at ``width`` cells; subclasses draw their last data."""
        return Text()

    def build_lines(self, width: int) -> list[Text] | None:
        """The panel's lines at ``width`` cells, for a panel that makes its text a
        line at a time (no text-wide style, no wrapping): drawn as they are, with
        no join into one Text and split again at every refresh.  None: the panel
        draws :meth:`build`."""
        return None

    def _split(self, text: Text, width: int) -> list[Text]:
        if self.WRAP:
            return list(text.wrap(self.app.console, max(1, width), overflow="fold", no_wrap=False))
        return list(text.split("\n", allow_blank=True))

    def redraw(self) -> None:
        width = self._content_width() or self.app.size.width
        built = None if self.WRAP or self.SELECTABLE else self.build_lines(width)
        if built is not None:
            self._redraw_lines(built)
            return
        text = self.build(width)
        if getattr(self.app, "ascii_only", False):
            # --ascii: what the panel quotes too ("83°C" in a finding, a name)
            text = ascii_text(text)
        text.no_wrap = not self.WRAP
        text.overflow = "fold" if self.WRAP else "crop"
        style = text.style
        if (
            text == self._text
            and style == self._text_style
            and (not self.WRAP or width == self._wrap_width)
        ):
            return
        restyled = style != self._text_style
        self._text_style = style
        if not self.SELECTABLE:
            # The text's own style is parsed as Textual does it (a colour name is its
            # CSS colour, "yellow" is #ffff00), not as Rich does (ANSI yellow), and
            # applied under every line; the spans keep Rich's meaning, as in Textual.
            self._rich_text_style = (
                self.app.stylesheet.parse_style(style).rich_style
                if isinstance(style, str)
                else style
            )
            text.style = ""
        lines = self._split(text, width)
        old = self._lines
        self._text = text
        self._made_lines = False
        self._lines = lines
        self._wrap_width = width
        self._repaint(old, lines, restyled)

    def _redraw_lines(self, lines: list[Text]) -> None:
        """:meth:`redraw` of the lines a panel made itself."""
        if getattr(self.app, "ascii_only", False):
            lines = [ascii_text(line) for line in lines]
        # A line's own style becomes a span over it, as joining the lines makes it
        # (Rich's render ignores the style of a Text without spans).
        lines = [_spanned(line) if line.style else line for line in lines]
        if not lines:
            lines = [Text()]
        old = self._lines
        restyled = self._text_style != ""
        if not restyled and self._made_lines and lines == old:
            return
        self._text_style, self._rich_text_style = "", Style.null()
        self._text = None  # joined when asked for (plain, render)
        self._made_lines = True
        self._lines = lines
        self._repaint(old, lines, restyled)

    def _repaint(self, old: list[Text], lines: list[Text], restyled: bool) -> None:
        if self.WRAP or len(lines) != len(old):
            self._strips = [None] * len(lines)
            self.refresh(layout=True)
            return
        if restyled:
            # The text's own style is under every line (and in every strip's key).
            self.refresh()
            return
        # Same line count: repaint only the runs of lines that changed (text or
        # spans), so that a panel whose title or idle rows stay put costs the
        # compositor, and Rich, only its moving lines.
        full = self.outer_size.width
        if not full:
            # Not laid out yet: a region refresh would be empty and Textual would keep
            # the lines it drew before; repaint all of it.
            self.refresh()
            return
        # Regions are relative to the content area: Widget.refresh adds the
        # gutter (border, padding) itself.
        y = 0
        count = len(lines)
        strips = self._strips
        changed: list[Region] = []
        while y < count:
            if lines[y] == old[y]:
                y += 1
                continue
            start = y
            while y < count and lines[y] != old[y]:
                strips[y] = None
                y += 1
            changed.append(Region(0, start, full, y - start))
        if changed:
            # one call for every run: Textual marks them and wakes the screen once
            repaint(self, *changed)

    @property
    def whole_text(self) -> Text:
        """The panel's text as one Text (the lines a panel made, joined)."""
        if self._text is None:
            self._text = Text("\n").join(self._lines)
        return self._text

    def render(self) -> Text:
        return self.whole_text

    def _content_width(self) -> int:
        """``content_region.width`` without looking the panel up on the screen: its
        laid-out width less its padding and border."""
        width = self.outer_size.width
        return max(0, width - self.styles.gutter.width) if width else 0

    def render_lines(self, crop: Region) -> list[Strip]:
        if self.SELECTABLE or (self.auto_links and self.hover_style._link_id):
            return self._textual_lines(crop)
        box = plain_box(self)
        if box is None:
            return self._textual_lines(crop)
        left, right, background, blank = box
        width, content_height = self.outer_size
        content_width = width - left - right
        self._drew_plain = True
        filters = tuple(self.get_line_filters())
        base = self.visual_style.rich_style + self._rich_text_style
        key = (content_width, left, right, base, blank, background, filters)
        if self._styled[0] != base or len(self._styled[1]) > 256:
            self._styled = (base, {})
        lines = self._lines
        cache = self._plain
        if self._recent[0] != key:
            self._recent = (key, {})
        recent = self._recent[1]
        strips: list[Strip] = []
        for y in crop.line_range:
            line = lines[y] if y < content_height and y < len(lines) else None
            # the entry names the very line object it drew (see render_line)
            cached = cache.get(y)
            if cached is not None and cached[0] is line and cached[1] == key:
                strip = cached[2]
            else:
                # a gauge going back and forth draws lines it drew a moment ago
                content = (
                    ("", (), y < content_height)
                    if line is None
                    else (line.plain, tuple(line._spans), line.style)
                )
                strip = recent.get(content)  # type: ignore[assignment]
                if strip is None:
                    strip = self._plain_strip(
                        line, y < content_height, content_width, base, box, filters
                    )
                    if len(recent) >= RECENT_LINES:
                        del recent[next(iter(recent))]
                    recent[content] = strip
                cache[y] = (line, key, strip)
            strips.append(strip)
        if crop.column_span != (0, width):
            x1, x2 = crop.column_span
            strips = [strip.crop(x1, x2) for strip in strips]
        return strips

    def _plain_strip(
        self,
        line: Text | None,
        content: bool,
        content_width: int,
        base: Style,
        box: PlainBox,
        filters: tuple[LineFilter, ...],
    ) -> Strip:
        """One line of a plain box as Textual's styles cache draws it (the content
        line padded to the content width in the panel's style, then the side
        padding in the background's, then the app's line filters), made as one
        Strip: the filters go over the segments before the strip is made, where
        Textual makes a second strip of the first (the same segments)."""
        left, right, background, blank = box
        segments: list[Segment]
        if line is None:
            segments = [Segment(" " * content_width, base if content else blank)]
        else:
            # the panel's style under each segment's (as Segment.apply_style does),
            # each sum worked out once while the panel's style holds
            styled = self._styled[1]
            segments = []
            append = segments.append
            length = 0
            for text, style, _control in text_segments(line, self.app.console):
                combined = styled.get(style)
                if combined is None:
                    combined = styled[style] = base + style
                append(Segment(text, combined))
                length += cell_len(text)
            if length < content_width:
                append(Segment(" " * (content_width - length), base))
            elif length > content_width:
                segments = list(Strip(segments, length).adjust_cell_length(content_width, base))
        if left or right:
            segments = line_pad(segments, left, right, blank)
        for line_filter in filters:
            segments = line_filter.apply(segments, background)
        return Strip(segments, content_width + left + right)

    def _textual_lines(self, crop: Region) -> list[Strip]:
        if self._drew_plain:
            # lines drawn by the fast path left Textual's cache behind: start afresh
            self._styles_cache.clear()
            self._drew_plain = False
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        if self.SELECTABLE:
            return super().render_line(y)
        width = self._content_width()
        base = self.visual_style.rich_style + self._rich_text_style
        if y >= len(self._lines):
            return Strip.blank(width, base)
        line = self._lines[y]
        cached = self._strips[y]
        # The entry names the very line object it drew: a strip can never outlive a
        # change of the line, whichever path replaced it (redraw, rewrap, restyle).
        if cached is not None and cached[2] is line and cached[0] == width and cached[1] == base:
            return cached[3]
        segments = text_segments(line, self.app.console)
        strip = Strip(Segment.apply_style(segments, base)).adjust_cell_length(width, base)
        self._strips[y] = (width, base, line, strip)
        return strip

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if self.SELECTABLE:
            return super().get_content_height(container, viewport, width)
        if self.WRAP and width and width != self._wrap_width:
            # Laid out at a width other than the last redraw's: wrap for that width.
            self._lines = self._split(self.whole_text, width)
            self._wrap_width = width
            self._strips = [None] * len(self._lines)
        return len(self._lines)

    def get_content_width(self, container: Size, viewport: Size) -> int:
        if self.SELECTABLE:
            return super().get_content_width(container, viewport)
        return max((cell_len(line.plain) for line in self._lines), default=0)

    @property
    def allow_select(self) -> bool:
        # Selection needs the offset metadata that only Textual's own path attaches.
        return self.SELECTABLE and super().allow_select

    def on_resize(self, _event: events.Resize) -> None:
        self.redraw()

    @property
    def plain(self) -> str:
        """What the panel shows, as plain text (tests read this)."""
        return self.whole_text.plain


def _spanned(line: Text) -> Text:
    """``line`` with its own style as a span over all of it."""
    out = Text(end=line.end)
    out.append_text(line)
    return out


def text_segments(text: Text, console: Console) -> list[Segment]:
    """``list(text.render(console))``, made directly for the lines panels draw:
    no style of the text's own, and spans that follow one another without
    overlapping, or that do so inside one span over the whole line (a line's own
    style, :func:`_spanned`).  Any other text is Rich's to render.
    (``tests/tui/test_text_panel_lines.py`` holds it to Rich's rendering.)"""
    spans = text._spans
    plain = text.plain
    if not spans:
        return [Segment(plain)]
    if text.style:
        return list(text.render(console))
    get_style = console.get_style
    null = Style.null()
    size = len(plain)
    outer = null
    first = spans[0]
    if first.start == 0 and first.end == size and len(spans) > 1:
        # a span over the whole line: the style under every other one
        outer = get_style(first.style, default=null)
        spans = spans[1:]
    out: list[Segment] = []
    append = out.append
    at = 0
    for span in spans:
        start, end = span.start, span.end
        if start < at or end < start or end > size:
            return list(text.render(console))  # overlapping or out of order: Rich's
        if start > at:
            append(Segment(plain[at:start], outer))
        if end > start:
            append(Segment(plain[start:end], outer + get_style(span.style, default=null)))
        at = end
    if at < size:
        append(Segment(plain[at:], outer))
    return out
