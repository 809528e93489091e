"""The text a Textual app shows, as lines (from its SVG screenshot)."""

from __future__ import annotations

import html
import re
from collections import defaultdict
from typing import Any

_TEXT = re.compile(r'<text class="[^"]*" x="([\d.]+)" y="([\d.]+)"[^>]*>(.*?)</text>')
#: one terminal cell in Rich's SVG export
_CELL_PX = 12.2


def screen_lines(app: Any) -> list[str]:
    """The screen as plain lines: each SVG text run placed at its cell."""
    rows: dict[float, list[tuple[float, str]]] = defaultdict(list)
    for m in _TEXT.finditer(str(app.export_screenshot())):
        rows[float(m.group(2))].append((float(m.group(1)), html.unescape(m.group(3))))
    lines = []
    for y in sorted(rows):
        line = ""
        for x, text in sorted(rows[y]):
            col = round(x / _CELL_PX)
            line = line.ljust(col)[:col] + text
        lines.append(line.replace("\xa0", " "))
    return lines


def screen_text(app: Any) -> str:
    return "\n".join(screen_lines(app))


def drawn(app: Any) -> list[str]:
    """The screen as drawn, one string per row, blank rows and notices included."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def rows_of(app: Any, *widgets: Any) -> list[str]:
    """The rows the widgets cover on screen, as drawn."""
    lines = drawn(app)
    out = []
    for widget in widgets:
        region = widget.region
        out.extend(line[region.x : region.right] for line in lines[region.y : region.bottom])
    return out


def notices(app: Any) -> list[str]:
    """The rows of the notices on screen (``run_test(notifications=True)``)."""
    from textual.widgets._toast import Toast

    return rows_of(app, *app.screen.query(Toast))
