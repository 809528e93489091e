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
- :func:`table`: columns that fit the width; the optional ones left out as it
  narrows (and said so under it), the name column elided, and where even that
  does not fit, each row as its own few lines of ``header value`` pairs.
- :func:`cells`: a text's width in terminal cells (a wide character is two):
  every width above is counted in cells.
- :func:`plural`, :func:`to_ascii`, :func:`limit_rows`, :func:`emit`.
"""

from __future__ import annotations

import os
import re
import sys
import unicodedata
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


def cells(text: str) -> int:
    """The terminal cells ``text`` takes: an East Asian wide or full-width
    character two, a combining mark or a zero-width character none."""
    if text.isascii():
        return len(text)
    return sum(_char_cells(ch) for ch in text)


_CELLS: dict[str, int] = {}


def _char_cells(ch: str) -> int:
    known = _CELLS.get(ch)
    if known is None:
        if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
            known = 0
        else:
            known = 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
        if len(_CELLS) < 4096:
            _CELLS[ch] = known
    return known


def head_cells(text: str, room: int) -> str:
    """The longest start of ``text`` that takes at most ``room`` cells."""
    if text.isascii():
        return text[: max(0, room)]
    used = 0
    for i, ch in enumerate(text):
        used += _char_cells(ch)
        if used > room:
            return text[:i]
    return text


def tail_cells(text: str, room: int) -> str:
    """The longest end of ``text`` that takes at most ``room`` cells."""
    if room <= 0:
        return ""
    if text.isascii():
        return text[-room:]
    used = 0
    for i in range(len(text) - 1, -1, -1):
        used += _char_cells(text[i])
        if used > room:
            return text[i + 1 :]
    return text


def pad(text: str, width: int, right: bool = False) -> str:
    """``text`` padded with spaces to ``width`` cells (on the left: ``right``)."""
    gap = " " * max(0, width - cells(text))
    return gap + text if right else text + gap


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
        room = width - cells(line)
        size = cells(word)
        if not empty and len(space) + size <= room:
            line += space + word
            continue
        if empty and size <= room:
            line, empty = line + word, False
            continue
        if not empty:
            lines.append(line)
            line, empty = follow, True
            room = width - cells(line)
        if size <= room:
            line, empty = line + word, False
            continue
        pieces = _split_word(word, max(1, room), max(1, width - cells(follow)))
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
    """``word`` in pieces of at most ``first``, then ``rest`` cells, each
    ending after a separator where one falls in the second half of the piece."""
    pieces: list[str] = []
    room = first
    while cells(word) > room:
        fits = len(head_cells(word, room)) or 1
        cut = max((word.rfind(ch, fits // 2, fits) for ch in _BREAKS), default=-1) + 1
        if cut <= 0:
            cut = fits
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
        size = cells(item)
        if empty and cells(line) + size <= width:
            line, empty = line + item, False
        elif not empty and cells(line) + len(sep) + size <= width:
            line += sep + item
        else:
            if not empty:
                lines.append(line)
                line = follow
            if cells(line) + size <= width:
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
    head = indent + (pad(label, column) if cells(label) < column else label + " ")
    return wrap(value, width, head, " " * cells(head))


def elide(name: str, width: int) -> str:
    """``name`` in at most ``width`` cells: its head and tail around
    :data:`MARKER` (the head is what tells kernels apart, the tail the variant)."""
    if cells(name) <= width:
        return name
    if width <= len(MARKER) + 2:
        return head_cells(name, width)
    keep = width - len(MARKER)
    head = (keep * 2 + 2) // 3
    return head_cells(name, head) + MARKER + tail_cells(name, keep - head)


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
    shown = {n: f if cells(f) <= width else elide(f, width) for n, f in form.items()}
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


#: an example or a sub-command in a help text: what to type, two spaces or more,
#: what it does
_EXAMPLE = re.compile(r"(\S(?:.*?\S)?)( {2,})(\S.*)$")


def help_block(text: str, width: int) -> list[str]:
    """A help text of several lines (examples, the sub-commands, a paragraph)
    within ``width`` cells: a heading (``examples:``) as it is; an example's
    description under its own column where it has room, else on the lines under
    the command; lines of a paragraph refilled together."""
    out: list[str] = []
    prose: list[str] = []
    prose_lead = 0

    def flush() -> None:
        if prose:
            lead = " " * prose_lead
            out.extend(wrap(" ".join(prose), width, lead, lead))
            prose.clear()

    for line in text.splitlines():
        body = line.lstrip(" ")
        lead = len(line) - len(body)
        heading = not lead and body.endswith(":")
        if not body or heading or body.startswith("gputui ") or _EXAMPLE.match(body):
            flush()
            out.extend([line] if cells(line) <= width else _example(line, width))
            continue
        if prose and lead != prose_lead:
            flush()
        prose.append(body)
        prose_lead = lead
    flush()
    return out


def _example(line: str, width: int) -> list[str]:
    """One example (``  gputui attach 12345 --once   step statistics``) within
    ``width`` cells."""
    body = line.lstrip(" ")
    lead = len(line) - len(body)
    more = " " * (lead + 4)
    match = _EXAMPLE.match(body)
    if match is None:
        return wrap(body, width, " " * lead, more)
    key, space, said = match.groups()
    column = lead + len(key) + len(space)
    if width - column >= 24:
        return wrap(said, width, line[:column], " " * column)
    return [*wrap(key, width, " " * lead, more), *wrap(said, width, more, more)]


def fit_lines(text: str, width: int) -> str:
    """``text`` with every line within ``width`` cells: a line whose text fits
    with less indent (argparse's usage lines under a long command) moved left,
    any other wrapped between words under its own indent."""
    out: list[str] = []
    for line in text.split("\n"):
        if cells(line) <= width:
            out.append(line)
            continue
        body = line.lstrip(" ")
        lead = len(line) - len(body)
        if cells(body) <= width - 2:
            out.append(" " * (width - cells(body)) + body)
        else:
            indent = " " * min(lead, width // 4)
            out.extend(wrap(body, width, indent, indent + "  "))
    return "\n".join(out)


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


#: a name column is not elided narrower than this (its header's width aside):
#: narrower, the table's rows are printed as lines of their own
MIN_NAME = 12


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
    least: int = MIN_NAME,
) -> list[str]:
    """A plain table that fits ``width`` cells: every column as wide as its
    widest cell, but the ``flexible`` one (a name), which takes what is left and
    elides its cells in the middle (after ``short``; two different names never
    print the same), or with ``wrap_flexible`` (the last column only) goes on
    on the next lines, under itself, whole.  ``right`` aligns columns to the
    right (numbers); ``rule`` draws a line of that character under the headers;
    ``optional`` columns are left out, in that order, while the table would not
    fit otherwise, and a line under it names them; ``under`` maps a row's index
    to lines printed under it.  Where the table does not fit even so (the name
    narrower than ``least`` cells), each row is printed as its own lines of
    ``header value`` pairs (:func:`_stacked`)."""
    keep = list(range(len(headers)))
    align = list(right) if right is not None else [False] * len(headers)
    grid = [list(r) for r in rows]
    if flexible is not None and short is not None:
        names = elide_all((r[flexible] for r in grid), 1 << 30, short)
        for r in grid:
            r[flexible] = names[r[flexible]]
    widths = [_widest(headers[i], grid, i) for i in keep]
    floor = 0 if flexible is None else max(cells(headers[flexible]), min(widths[flexible], 16))

    def others(columns: list[int]) -> int:
        fixed = sum(widths[i] for i in columns if i != flexible)
        return fixed + len(gap) * (len(columns) - 1)

    def fits(columns: list[int], least: int) -> bool:
        return others(columns) + (least if flexible in columns else 0) <= width

    dropped: list[str] = []
    for drop in optional:
        if fits(keep, floor):
            break
        keep.remove(drop)
        dropped.append(headers[drop])
    if flexible is not None and flexible in keep and not fits(keep, floor):
        # narrower still: the name takes what is left, down to a few cells
        floor = max(cells(headers[flexible]), min(floor, least), width - others(keep))
    if not fits(keep, floor):
        return _stacked(headers, grid, width, flexible, under)
    wrapped: dict[int, list[str]] = {}
    if flexible is not None and flexible in keep:
        room = max(floor, width - others(keep))
        if widths[flexible] > room and wrap_flexible and flexible == keep[-1]:
            start = " " * others(keep)
            for n, r in enumerate(grid):
                parts = wrap(r[flexible], width, start)
                r[flexible] = parts[0][len(start) :]
                wrapped[n] = parts[1:]
            widths[flexible] = _widest(headers[flexible], grid, flexible)
        elif widths[flexible] > room:
            names = elide_all((r[flexible] for r in grid), room)
            for r in grid:
                r[flexible] = names[r[flexible]]
            widths[flexible] = _widest(headers[flexible], grid, flexible)

    # one format for every row: padding and joining in one call a row (a row with
    # a wide character is padded by its cells instead)
    template = (
        gap.replace("{", "{{")
        .replace("}", "}}")
        .join(f"{{{i}:{'>' if align[i] else '<'}{widths[i]}}}" for i in keep)
    )

    def line(row: Sequence[str]) -> str:
        if all(cell.isascii() for cell in row):
            return template.format(*row).rstrip()
        return gap.join(pad(row[i], widths[i], align[i]) for i in keep).rstrip()

    body: list[str] = []
    for n, r in enumerate(grid):
        body.append(line(r))
        body.extend(wrapped.get(n, ()))
        body.extend(under.get(n, ()) if under else ())
    if dropped:
        body.extend(wrap(f"({', '.join(dropped)}: not shown at this width)", width))
    head = line(headers)
    if not rule:
        return [head, *body]
    return [head, rule * max(cells(x) for x in (head, *body)), *body]


def _stacked(
    headers: Sequence[str],
    grid: Sequence[Sequence[str]],
    width: int,
    flexible: int | None,
    under: Mapping[int, Sequence[str]] | None,
) -> list[str]:
    """A table too wide for ``width`` as ``ps`` wraps one: each row on its own
    lines, its name (the flexible column) first and whole, then every other
    column as ``header value``, indented under it."""
    out: list[str] = []
    # a first column that is a short key (a GPU, a rank, a row number) goes before
    # the name: "GPU 0  H100 80GB HBM3"
    keyed = bool(flexible) and bool(headers[0]) and max(cells(r[0]) for r in grid) <= 4
    for n, row in enumerate(grid):
        items = [
            f"{headers[i]} {cell}" if headers[i] else cell
            for i, cell in enumerate(row)
            if i != flexible and cell not in ("", "-")  # nothing to say: left out
        ]
        if flexible is not None:
            name = row[flexible]
            if keyed and row[0] not in ("", "-"):
                name, items = f"{items[0]}  {name}", items[1:]
            out.extend(wrap(name, width, "", TAB))
            out.extend(wrap_items(items, width, indent=TAB * 2, subsequent=TAB * 2))
        else:
            out.extend(wrap_items(items, width, subsequent=TAB * 2))
        out.extend(under.get(n, ()) if under else ())
    return out


#: the indent of a report's tables and of a long line's continuation
TAB = "  "


def insert_columns(headers: list[str], right: list[bool], *added: tuple[bool, int, str]) -> None:
    """Insert the left-aligned columns ``added`` that are shown (``(shown, index,
    header)``, in that order) into a table's ``headers`` and their alignment."""
    for shown, at, header in added:
        if shown:
            headers.insert(at, header)
            right.insert(at, False)


def indented_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int,
    *,
    right: Sequence[bool],
    flexible: int | None,
    short: Callable[[str], str] | None = None,
    optional: Sequence[int] = (),
    least: int = MIN_NAME,
) -> list[str]:
    """:func:`table` one :data:`TAB` in from the text above it, within ``width``."""
    lines = table(
        headers,
        rows,
        width - len(TAB),
        right=right,
        flexible=flexible,
        short=short,
        optional=optional,
        least=least,
    )
    return [TAB + line for line in lines]


def _widest(header: str, rows: Sequence[Sequence[str]], column: int) -> int:
    return max(cells(header), max(map(cells, map(itemgetter(column), rows)), default=0))


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


def say(message: str, stream: TextIO | None = None) -> None:
    """A command's message on ``stream`` (standard error): ``gputui record:
    recorded ...``, wrapped to the output's width under its first word."""
    stream = sys.stderr if stream is None else stream
    stream.write("\n".join(wrap(message, output_width(stream), "", "  ")) + "\n")
