"""The text layer every printed report stands on: plain strings, no Rich.

- :func:`output_width`: ``COLUMNS``, else the terminal's width, else 80 (piped);
  :func:`output_height`: the terminal's height, None when piped.
- :func:`wrap`: whole words, a hanging indent; a word longer than a whole line
  goes on on the next (broken after a separator where it has one), never cut.
- :func:`elide`: a long kernel or op name shortened in the middle with an ASCII
  marker; :func:`elide_all` shortens a set of names so that two different names
  never print the same.
- :func:`wrap_items` (short items, a line broken only between two of them),
  :func:`labelled` (a labelled field wrapped under itself).
- :func:`plural`, :func:`to_ascii`, :func:`limit_rows`, :func:`table`, :func:`emit`.
"""

from __future__ import annotations

import os
import re
import sys
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import itemgetter
from typing import TextIO

from gputui import fmt

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
        "▉": "#",
        "▊": "#",
        "▋": "#",
        "▍": "|",
        "▎": "|",
        "↑": "^",
        "↓": "v",
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
    columns = fmt.terminal_columns(sys.stdout if stream is None else stream)
    return PIPE_WIDTH if columns is None else max(MIN_WIDTH, columns)


def output_height(stream: TextIO | None = None) -> int | None:
    """The terminal's height in lines when ``stream`` (standard output) is one
    (``LINES`` overrides it there); None for a pipe or a file: no limit."""
    stream = sys.stdout if stream is None else stream
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError, OSError):
        return None
    return max(1, fmt.terminal_lines(stream) or 24)


def wrap(text: str, width: int, indent: str = "", subsequent: str | None = None) -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken between words; the
    first line starts with ``indent``, the others with ``subsequent`` (a hanging
    indent).  A word longer than a whole line (a path, a kernel name in a sentence)
    starts a line of its own and goes on on the next ones, broken after a ``/``,
    ``_``, ``:``, ``,`` or ``.`` where it has one: nothing is left out.  A unit
    stays on the line of its number ("2 s", "990 TFLOP/s"); runs of spaces inside
    a line are kept."""
    follow = indent if subsequent is None else subsequent
    lines: list[str] = []
    line, empty = indent, True
    for space, word in _words(text):
        room = width - len(line)
        if not empty and len(space) + len(word) <= room:
            line += space + word
            continue
        if empty and len(word) <= room:
            line, empty = line + word, False
            continue
        if not empty:
            lines.append(line)
            line, empty = follow, True
            room = width - len(line)
        if len(word) <= room:
            line, empty = line + word, False
            continue
        pieces = _split_word(word, max(1, room), max(1, width - len(follow)))
        for piece in pieces[:-1]:
            lines.append(line + piece)
            line = follow
        line, empty = line + pieces[-1], False
    lines.append(line if not empty else line.rstrip())
    return lines


#: a word and the space before it (kept inside a line: "compute 58.6%   idle 41%")
_WORD = re.compile(r"(\s*)(\S+)")
#: a unit after a number stays on its line ("2 s", "38.2 ms", "990 TFLOP/s")
_UNIT = re.compile(
    r"(?:s|ms|us|µs|ns|[KMGT]i?B(?:/s)?|B|GB/s|TFLOP/s|W|MHz|C|%|steps?|ms/step)[,.;:)]*$"
)


def _words(text: str) -> list[tuple[str, str]]:
    """``text``'s words, each with the space before it; a unit is one word with
    the number before it."""
    words: list[tuple[str, str]] = []
    for match in _WORD.finditer(text):
        space, word = match.group(1), match.group(2)
        space = " " if not space or "\n" in space else space
        if words and words[-1][1][-1:].isdigit() and space == " " and _UNIT.match(word):
            words[-1] = (words[-1][0], words[-1][1] + space + word)
            continue
        words.append((space, word))
    return words


#: where a word too long for a line is best broken: after one of these
_BREAKS = "/_:,.;=-"


def _split_word(word: str, first: int, rest: int) -> list[str]:
    """``word`` in pieces of at most ``first``, then ``rest`` characters, each
    ending after a separator where one falls in the second half of the piece."""
    pieces: list[str] = []
    room = first
    while len(word) > room:
        cut = max((word.rfind(ch, room // 2, room) for ch in _BREAKS), default=-1) + 1
        if cut <= 0:
            cut = room
        pieces.append(word[:cut])
        word = word[cut:]
        room = rest
    pieces.append(word)
    return pieces


def wrap_items(
    items: Iterable[str],
    width: int,
    sep: str = "  ",
    indent: str = "",
    subsequent: str | None = None,
) -> list[str]:
    """Short items (``SM 88%``, ``mem 1.5GiB/126GiB``) on as few lines as fit,
    ``sep`` between them, a line broken only between two items."""
    follow = indent if subsequent is None else subsequent
    lines: list[str] = []
    line, empty = indent, True
    for item in items:
        if not item:
            continue
        if empty and len(line) + len(item) <= width:
            line, empty = line + item, False
        elif not empty and len(line) + len(sep) + len(item) <= width:
            line += sep + item
        else:
            if not empty:
                lines.append(line)
                line = follow
            if len(line) + len(item) <= width:
                line, empty = line + item, False
            else:  # an item longer than a line: wrapped on its own
                wrapped = wrap(item, width, line, follow)
                lines.extend(wrapped[:-1])
                line, empty = wrapped[-1], False
    if not empty:
        lines.append(line)
    return lines


def labelled(label: str, value: str, width: int, indent: str = "", column: int = 0) -> list[str]:
    """``value`` after ``label`` (padded to ``column`` characters), wrapped whole
    under itself: ``   fix   use torch.compile ...`` and a hanging indent."""
    head = indent + (label.ljust(column) if len(label) < column else label + " ")
    return wrap(value, width, head, " " * len(head))


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


def elide_all(
    names: Iterable[str], width: int, short: Callable[[str], str] | None = None
) -> dict[str, str]:
    """Each name as shown in at most ``width`` characters: ``short`` first (a
    kernel's short name, which two kernels may share), then :func:`elide`.  Where
    two different names would print the same, each of them carries a short tag of
    its full name (and, in the rare case tags meet too, a number)."""
    unique = list(dict.fromkeys(names))
    form = dict(zip(unique, unique if short is None else map(short, unique), strict=True))
    # most names fit: elided only where longer (a table of 20,000 rows)
    shown = {n: f if len(f) <= width else elide(f, width) for n, f in form.items()}
    counter = 0
    for attempt in range(len(unique) + 1):
        seen = Counter(shown.values())
        if len(seen) == len(shown):
            break
        clashes: dict[str, list[str]] = {}
        for n, s in shown.items():
            if seen[s] > 1:
                clashes.setdefault(s, []).append(n)
        for group in clashes.values():
            for n in group:
                if attempt == 0:
                    tag = _tag(n)
                else:
                    counter += 1
                    tag = f"#{counter}"
                shown[n] = elide(form[n], max(1, width - len(tag))) + tag
    return shown


def kernel_name(name: str) -> str:
    """A kernel's name as every report shows it: its short name (the one ``gputui
    analyze`` and the attach screen use), made safe for a terminal.  Tables pass
    it to :func:`elide_all` as ``short``: two kernels that share a short name
    still print apart.  (The trace math loads here, not with ``gputui --once``.)"""
    from gputui.trace.kernels import short_kernel_name

    return fmt.clean(short_kernel_name(name))


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
    flexible: int | None = 0,
    gap: str = "  ",
    short: Callable[[str], str] | None = None,
    rule: str = "",
    optional: Sequence[int] = (),
    wrap_flexible: bool = False,
    under: Mapping[int, Sequence[str]] | None = None,
) -> list[str]:
    """A plain table that fits ``width``: every column as wide as its widest
    cell, but the ``flexible`` one (a name), which takes what is left and
    elides its cells in the middle (after ``short``; two different names never
    print the same), or with ``wrap_flexible`` (the last column only) goes on
    on the next lines, under itself, whole.  ``right`` aligns columns to the
    right (numbers); ``rule`` draws a line of that character under the headers;
    ``optional`` columns are left out, in that order, while the table would not
    fit otherwise; ``under`` maps a row's index to lines printed under it."""
    keep = list(range(len(headers)))
    align = list(right) if right is not None else [False] * len(headers)
    cells = [list(r) for r in rows]
    if flexible is not None and short is not None:
        names = elide_all((r[flexible] for r in cells), 1 << 30, short)
        for r in cells:
            r[flexible] = names[r[flexible]]
    widths = [_widest(headers[i], cells, i) for i in keep]
    floor = 0 if flexible is None else max(len(headers[flexible]), min(widths[flexible], 16))

    def others(columns: list[int]) -> int:
        fixed = sum(widths[i] for i in columns if i != flexible)
        return fixed + len(gap) * (len(columns) - 1)

    for drop in optional:
        if others(keep) + (floor if flexible in keep else 0) <= width:
            break
        keep.remove(drop)
    wrapped: dict[int, list[str]] = {}
    if flexible is not None and flexible in keep:
        room = max(floor, width - others(keep))
        if widths[flexible] > room and wrap_flexible and flexible == keep[-1]:
            start = " " * others(keep)
            for n, r in enumerate(cells):
                parts = wrap(r[flexible], width, start)
                r[flexible] = parts[0][len(start) :]
                wrapped[n] = parts[1:]
            widths[flexible] = _widest(headers[flexible], cells, flexible)
        elif widths[flexible] > room:
            names = elide_all((r[flexible] for r in cells), room)
            for r in cells:
                r[flexible] = names[r[flexible]]
            widths[flexible] = _widest(headers[flexible], cells, flexible)

    # one format for every row: padding and joining in one call a row
    template = (
        gap.replace("{", "{{")
        .replace("}", "}}")
        .join(f"{{{i}:{'>' if align[i] else '<'}{widths[i]}}}" for i in keep)
    )

    def line(row: Sequence[str]) -> str:
        return template.format(*row).rstrip()

    body: list[str] = []
    for n, r in enumerate(cells):
        body.append(line(r))
        body.extend(wrapped.get(n, ()))
        body.extend(under.get(n, ()) if under else ())
    head = line(headers)
    if not rule:
        return [head, *body]
    return [head, rule * max(len(x) for x in (head, *body)), *body]


#: the indent of a report's tables and of a long line's continuation
TAB = "  "


def indented_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int,
    *,
    right: Sequence[bool],
    flexible: int | None,
    short: Callable[[str], str] | None = None,
) -> list[str]:
    """:func:`table` one :data:`TAB` in from the text above it, within ``width``."""
    lines = table(headers, rows, width - len(TAB), right=right, flexible=flexible, short=short)
    return [TAB + line for line in lines]


def _widest(header: str, rows: Sequence[Sequence[str]], column: int) -> int:
    return max(len(header), max(map(len, map(itemgetter(column), rows)), default=0))


def plain_terminal() -> bool:
    """``TERM=dumb``: a terminal (an editor's shell, a CI log) that draws neither
    block characters nor line drawing: every report and screen is drawn in
    ASCII, as with ``--ascii``."""
    return os.environ.get("TERM") == "dumb"


def emit(lines: Iterable[str], ascii_only: bool = False, stream: TextIO | None = None) -> None:
    """The report's lines on ``stream`` (standard output), in ASCII with ``--ascii``
    (or on a ``TERM=dumb`` terminal)."""
    body = "\n".join(lines)
    if ascii_only or plain_terminal():
        body = to_ascii(body)
    (sys.stdout if stream is None else stream).write(body + "\n")
