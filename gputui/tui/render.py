"""Rich rendering shared by the panels: bars, sparklines, colours, joined parts.

Plain strings (units, truncation, the sanitizer) come from :mod:`gputui.fmt`;
this module only turns them into styled Rich ``Text``.  Every function takes
``ascii_only`` where it would otherwise draw block characters, so a plain
terminal (or a serial console over SSH) stays readable.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from gputui import fmt
from gputui.reports import findings as findings_text

_SPARK = "▁▂▃▄▅▆▇█"
_SPARK_ASCII = "_.-~=+*#"
#: eighths of a cell, for the step bars' partial tops
EIGHTHS = " ▏▎▍▌▋▊▉█"

# how a finding's or a throttle's severity is coloured: one table for every view
SEVERITY_STYLE = findings_text.SEVERITY_STYLE


def level_style(pct: float | None) -> str:
    """Colour for a 0..100 load value: calm, busy, hot."""
    if pct is None:
        return "dim"
    if pct >= 90:
        return "red"
    if pct >= 60:
        return "yellow"
    return "green"


def untrusted(text: object, style: str = "", limit: int = fmt.MAX_TEXT) -> Text:
    """Text from outside gputui (a command line, a kernel name), made safe."""
    return Text(fmt.clean(text, limit), style=style)


def bar(
    fraction: float | None,
    width: int,
    ascii_only: bool = False,
    style: str | None = None,
    label: str = "",
    fallback: str | tuple[str, ...] = (),
) -> Text:
    """A horizontal bar ``width`` cells wide, with ``label`` written over its right
    end, or the first of the shorter ``fallback`` labels that fits."""
    width = max(1, width)
    if label and len(label) >= width:
        for shorter in (fallback,) if isinstance(fallback, str) else fallback:
            if len(shorter) < width:
                label = shorter
                break
    text = Text()
    if fraction is None or fraction != fraction:
        text.append(label.rjust(width)[-width:] if label else "-" * width, style="dim")
        return text
    fraction = max(0.0, min(1.0, fraction))
    cells = fmt.bar(fraction, width, ascii_only)
    colour = style or level_style(fraction * 100)
    if label and len(label) < width:
        # Write the label over the empty end of the bar so the number sits inside it.
        start = width - len(label)
        text.append(cells[:start], style=colour)
        text.append(label, style="bold")
        return text
    text.append(cells, style=colour)
    return text


def sparkline(
    values: Sequence[float | None],
    width: int,
    maximum: float | None = 100.0,
    ascii_only: bool = False,
    style: str = "cyan",
) -> Text:
    """The last values squeezed into ``width`` cells (max per bucket), right aligned."""
    chars = _SPARK_ASCII if ascii_only else _SPARK
    width = max(1, width)
    buckets = bucketize(values, width)
    top = maximum
    if top is None:
        present = [v for v in buckets if v is not None]
        top = max(present) if present else 1.0
    top = top or 1.0
    text = Text(" " * (width - len(buckets)))
    cells = []
    for value in buckets:
        if value is None:
            cells.append(" ")
            continue
        level = max(0.0, min(1.0, value / top))
        cells.append(chars[min(len(chars) - 1, int(level * (len(chars) - 1) + 0.5))])
    text.append("".join(cells), style=style)
    return text


def bucketize(values: Sequence[float | None], width: int) -> list[float | None]:
    """At most ``width`` points: each the max of its share of ``values`` (peaks survive)."""
    n = len(values)
    if n <= width:
        return list(values)
    out: list[float | None] = []
    for i in range(width):
        lo = i * n // width
        hi = (i + 1) * n // width
        present = [v for v in values[lo:hi] if v is not None]
        out.append(max(present) if present else None)
    return out


def join_parts(
    text: Text, parts: list[tuple[str, str]], width: int, ascii_only: bool | None = None
) -> None:
    """Append ``(part, style)`` pairs separated by two spaces while they fit in
    ``width``; the first that does not is cut with an ellipsis (if there is room
    for a few characters of it), the rest are left out."""
    for i, (part, style) in enumerate(parts):
        sep = "  " if i else ""
        if len(text) + len(sep) + len(part) > width:
            room = width - len(text) - len(sep)
            if room > 4:
                text.append(sep)
                text.append(fmt.truncate(part, room, ascii_only), style=style)
            break
        text.append(sep, style="dim")
        text.append(part, style=style)
