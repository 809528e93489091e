"""The text layer every printed report stands on: plain strings, no Rich.

- :func:`output_width`: ``COLUMNS``, else the terminal's width, else 80 (piped).
- :func:`wrap`: whole words, a hanging indent; a word longer than the line is
  kept whole rather than cut.
- :func:`elide`: a long kernel or op name shortened in the middle with an ASCII
  marker; :func:`elide_all` shortens a set of names so that two different names
  never print the same.
- :func:`plural`, :func:`to_ascii`, :func:`limit_rows`, :func:`table`.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
import zlib
from collections.abc import Iterable, Sequence
from typing import TextIO

#: the width of a report that goes to a pipe or a file
PIPE_WIDTH = 80
#: narrower than this, reports are not laid out (they wrap as the terminal does)
MIN_WIDTH = 40
#: the marker of an elided middle (ASCII: it survives any terminal and --ascii)
MARKER = "..."

_ASCII = str.maketrans(
    {
        "…": "...",
        "°": " deg",
        "×": "x",
        "µ": "u",
        "—": "-",
        "–": "-",
        "→": "->",
        "←": "<-",
        "≥": ">=",
        "≤": "<=",
        "±": "+/-",
        "·": "-",
        "•": "*",
        "▌": "|",
        "▏": "|",
        "│": "|",
        "─": "-",
        "━": "=",
        "█": "#",
        "░": ".",
        "✓": "ok",
        "✗": "x",
        "’": "'",
        "“": '"',
        "”": '"',
        "σ": "sd",
        "²": "^2",
        "√": "sqrt",
        "ᵀ": "^T",
    }
)


def output_width(stream: TextIO | None = None) -> int:
    """The width to lay a report out for: ``COLUMNS`` when set to a number, else
    the terminal's width when ``stream`` is one, else :data:`PIPE_WIDTH`."""
    value = os.environ.get("COLUMNS", "").strip()
    if value.isdigit() and int(value) > 0:
        return max(MIN_WIDTH, int(value))
    stream = sys.stdout if stream is None else stream
    try:
        if stream.isatty():
            return max(MIN_WIDTH, shutil.get_terminal_size((PIPE_WIDTH, 24)).columns)
    except (AttributeError, ValueError, OSError):
        pass
    return PIPE_WIDTH


def wrap(text: str, width: int, indent: str = "", subsequent: str | None = None) -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken between words
    (a single word longer than the line stands alone, whole)."""
    follow = indent if subsequent is None else subsequent
    lines = textwrap.wrap(
        text,
        width=max(width, len(follow) + 1, len(indent) + 1),
        initial_indent=indent,
        subsequent_indent=follow,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return lines or [indent.rstrip()]


def elide(name: str, width: int) -> str:
    """``name`` in at most ``width`` characters: its head and tail around
    :data:`MARKER` (the head is what tells kernels apart, the tail the variant)."""
    if len(name) <= width:
        return name
    if width <= len(MARKER) + 2:
        return name[:width]
    keep = width - len(MARKER)
    head = (keep * 2 + 2) // 3
    return name[:head] + MARKER + name[len(name) - (keep - head) :]


def _tag(name: str) -> str:
    return f"#{zlib.crc32(name.encode('utf-8', 'surrogatepass')) & 0xFFFF:04x}"


def elide_all(names: Iterable[str], width: int) -> dict[str, str]:
    """Each name shortened to ``width``; where two different names would print
    the same, each of them carries a short tag of its full name."""
    unique = list(dict.fromkeys(names))
    shown = {n: elide(n, width) for n in unique}
    seen: dict[str, list[str]] = {}
    for n, s in shown.items():
        seen.setdefault(s, []).append(n)
    for clash in (group for group in seen.values() if len(group) > 1):
        for n in clash:
            tag = _tag(n)
            shown[n] = elide(n, max(1, width - len(tag))) + tag
    return shown


def plural(count: int, word: str, many: str | None = None) -> str:
    """``1 step``, ``2 steps``; ``many`` for irregular plurals."""
    if count == 1:
        return f"{count} {word}"
    return f"{count:,} {many or word + 's'}"


def to_ascii(text: str) -> str:
    """``text`` with the typographic characters reports use replaced by ASCII,
    and any other non-ASCII character by ``?``."""
    return text.translate(_ASCII).encode("ascii", "replace").decode("ascii")


def limit_rows(rows: Sequence[object], limit: int | None) -> tuple[Sequence[object], int]:
    """The first ``limit`` rows (all when None) and how many were left out."""
    if limit is None or limit >= len(rows):
        return rows, 0
    return rows[: max(0, limit)], len(rows) - max(0, limit)


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int,
    *,
    right: Sequence[bool] | None = None,
    flexible: int = 0,
    gap: str = "  ",
) -> list[str]:
    """A plain table that fits ``width``: every column as wide as its widest
    cell, but the ``flexible`` one (a name), which takes what is left and
    elides its cells in the middle (two different names never print the same).
    ``right`` aligns columns to the right (numbers)."""
    n = len(headers)
    align = list(right) if right is not None else [False] * n
    widths = [max([len(headers[i]), *(len(r[i]) for r in rows)]) for i in range(n)]
    others = sum(w for i, w in enumerate(widths) if i != flexible) + len(gap) * (n - 1)
    room = max(len(headers[flexible]), 12, width - others)
    if widths[flexible] > room:
        names = elide_all((r[flexible] for r in rows), room)
        rows = [[*r[:flexible], names[r[flexible]], *r[flexible + 1 :]] for r in rows]
        widths[flexible] = max([len(headers[flexible]), *(len(r[flexible]) for r in rows)])

    def line(cells: Sequence[str]) -> str:
        out = [
            cells[i].rjust(widths[i]) if align[i] else cells[i].ljust(widths[i]) for i in range(n)
        ]
        return gap.join(out).rstrip()

    return [line(headers), *(line(r) for r in rows)]
