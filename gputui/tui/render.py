"""Rich rendering shared by the panels: bars, sparklines, colours, joined parts.

Plain strings (units, truncation, the sanitizer) come from :mod:`gputui.fmt`;
this module only turns them into styled Rich ``Text``.  Every function takes
``ascii_only`` where it would otherwise draw block characters, so a plain
terminal (or a serial console over SSH) stays readable.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import cast

from rich.text import Text

from gputui import fmt
from gputui.analysis.finding import Finding
from gputui.reports import findings as findings_text
from gputui.reports.text import to_ascii

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
    # each value's character, worked out once per graph top (see _Levels)
    levels = _levels(chars, top)
    text.append("".join(map(levels.__getitem__, buckets)), style=style)
    return text


class _Levels(dict[float | None, str]):
    """A value's character in a graph whose top is ``top``: its level (value /
    top, in 0..1) rounded to the nearest of ``chars``, a blank for a gap.  Made
    for each value the first time it is asked for: a graph's values repeat (whole
    percents), and the graphs are drawn again at every sample."""

    def __init__(self, chars: str, top: float) -> None:
        super().__init__({None: " "})
        self.chars = chars
        self.top = top
        self.last = len(chars) - 1

    def __missing__(self, value: float) -> str:
        char = self.chars[int(max(0.0, min(1.0, value / self.top)) * self.last + 0.5)]
        if len(self) < 4096:  # bounded: values that never repeat (watts) are not kept
            self[value] = char
        return char


@functools.lru_cache(maxsize=64)
def _levels(chars: str, top: float) -> _Levels:
    return _Levels(chars, top)


def bucketize(values: Sequence[float | None], width: int) -> list[float | None]:
    """At most ``width`` points: each the max of its share of ``values`` (peaks survive)."""
    n = len(values)
    if n <= width:
        return list(values)
    if None not in values:  # the usual case: no gap in the series, one pass in C
        full = cast("Sequence[float]", values)
        return list(map(max, map(full.__getitem__, _shares(n, width))))
    out: list[float | None] = []
    lo = 0
    for i in range(1, width + 1):
        hi = i * n // width
        share = values[lo:hi]
        lo = hi
        if None not in share:  # the usual case: no gap in the series
            out.append(max(cast("Sequence[float]", share)))
            continue
        present = [v for v in share if v is not None]
        out.append(max(present) if present else None)
    return out


@functools.lru_cache(maxsize=64)
def _shares(n: int, width: int) -> tuple[slice, ...]:
    """Where each of ``width`` buckets takes its share of ``n`` values (n > width)."""
    return tuple(slice(i * n // width, (i + 1) * n // width) for i in range(width))


def join_parts(
    text: Text,
    parts: list[tuple[str, str]],
    width: int,
    ascii_only: bool | None = None,
    *,
    cut: bool = False,
    cut_first: bool = False,
) -> None:
    """Append ``(part, style)`` pairs separated by two spaces while they fit in
    ``width``: whole parts only, the first that does not fit and the rest are left
    out.  With ``cut`` (a part that quotes the job, such as its errors) that first
    part is cut with an ellipsis instead, when there is room for a few characters;
    with ``cut_first``, only the line's first part is (a sentence, then details
    that go whole or not at all)."""
    for i, (part, style) in enumerate(parts):
        sep = "  " if i else ""
        if len(text) + len(sep) + len(part) > width:
            room = width - len(text) - len(sep)
            if (cut or (cut_first and i == 0)) and room > 4:
                text.append(sep)
                text.append(fmt.truncate(part, room, ascii_only), style=style)
            break
        text.append(sep, style="dim")
        text.append(part, style=style)


def first_fitting(width: int, *choices: str) -> str:
    """The first of ``choices`` (longest first) that fits in ``width``, else the last."""
    for choice in choices:
        if len(choice) <= width:
            return choice
    return choices[-1]


def line_spans(plain: str, width: int, hang: int = 0) -> list[tuple[int, int]]:
    """Where ``plain`` (one line) breaks to fit ``width`` cells: (start, end) of
    each line, breaking between words; a word longer than a line is folded.  Lines
    after the first are ``hang`` cells narrower (they are indented by that much),
    and a first line never breaks inside its own first ``hang`` cells (a label)."""
    width = max(1, width)
    hang = max(0, min(hang, width - 8)) if width > 8 else 0
    spans: list[tuple[int, int]] = []
    start = 0
    room = width
    floor = hang
    end_all = len(plain.rstrip(" "))
    while end_all - start > room:
        lo = start + max(floor, 1)
        cut = plain.rfind(" ", lo, start + room + 1)
        word_end = plain.find(" ", cut + 1) if cut >= lo else -1
        word = (end_all if word_end < 0 else word_end) - cut - 1
        if cut < lo or word > width - hang:
            # no space to break at, or the next word is folded anyway: fill the line
            end = nxt = start + room
        else:
            end, nxt = cut, cut + 1
            while end > start and plain[end - 1] == " ":
                end -= 1
        spans.append((start, end))
        start = nxt
        while start < end_all and plain[start] == " ":
            start += 1
        room = width - hang
        floor = 0
    spans.append((start, end_all))
    return spans


def hanging(text: Text, width: int, hang: int | Callable[[str], int] | None = None) -> Text:
    """``text`` wrapped at ``width`` between words, each line's continuation
    indented: by ``hang`` cells, or by what ``hang`` says for the line's text,
    or (None) under the line's content, after its leading spaces and first word
    (a label: ``"   fix  ..."``, ``" WARN  ..."``)."""
    out: list[Text] = []
    for line in text.split("\n", allow_blank=True):
        plain = line.plain
        if len(plain) <= width:
            out.append(line)
            continue
        if hang is None:
            indent = label_width(plain)
        elif callable(hang):
            indent = hang(plain)
        else:
            indent = hang
        spans = line_spans(plain, width, indent)
        indent = max(0, min(indent, width - 8)) if width > 8 else 0
        for i, (start, end) in enumerate(spans):
            piece = line[start:end]
            if i:
                piece = Text(" " * indent) + piece
            out.append(piece)
    joined = Text("\n", style=text.style).join(out)
    joined.end = text.end
    return joined


def label_width(plain: str) -> int:
    """The cells before a line's content: its leading spaces, first word and the
    spaces after it (0 when the first word is not followed by a space)."""
    i = lead_width(plain)
    while i < len(plain) and plain[i] != " ":
        i += 1
    if i >= len(plain):
        return 0
    while i < len(plain) and plain[i] == " ":
        i += 1
    return i


def lead_width(plain: str) -> int:
    """A line's leading spaces."""
    return len(plain) - len(plain.lstrip(" "))


def ascii_text(text: Text) -> Text:
    """``text`` with every non-ASCII character replaced as ``--ascii`` prints it
    ("°" as " deg", "·" as "-", a block as "#", anything else as "?"), its styles
    kept on the replacement."""
    plain = text.plain
    if plain.isascii():
        return text
    cuts: list[int] = []
    for i, char in enumerate(plain):
        if not char.isascii():
            cuts.extend((i, i + 1))
    out = text.blank_copy()
    for piece in text.divide(cuts):
        if not piece.plain or piece.plain.isascii():
            out.append_text(piece)
            continue
        swap = Text(to_ascii(piece.plain), style=piece.style)
        for span in piece.spans:
            swap.stylize(span.style, 0, len(swap))
        out.append_text(swap)
    return out


def whole_words(text: str, width: int) -> str:
    """``text`` cut after its last whole word that fits in ``width`` ("" if none)."""
    if len(text) <= width:
        return text
    cut = text.rfind(" ", 0, width + 1)
    return text[:cut].rstrip(" ,;:(") if cut > 0 else ""


def finding_line(f: Finding, width: int, scope: bool = False) -> Text:
    """One finding on one line of ``width`` cells: severity, what it costs, its
    title (``scope: title`` with ``scope``, alone on a line: no column for a
    cost it does not have), then as many whole clauses of its evidence as fit;
    never a cut word (``f`` shows it all)."""
    text = Text()
    text.append(f" {f.severity.upper():4} ", style=SEVERITY_STYLE[f.severity])
    cost = findings_text.impact_text(f)
    text.append(f" {cost:>4} " if cost else (" " if scope else "      "), style="bold")
    title = fmt.clean(f.title, 200)
    if scope:
        title = f"{fmt.clean(f.scope, 80)}: {title}"
    text.append(whole_words(title, width - len(text)), style="bold")
    shown: list[str] = []
    for clause in fmt.clean(f.evidence).split("; "):
        evidence = "; ".join([*shown, clause])
        if len(text) + 2 + len(evidence) > width:
            break
        shown.append(clause)
    if shown:
        text.append("  " + "; ".join(shown), style="dim")
    return text


def findings_count(count: int, more: int, room: int) -> str:
    """'3 ranked by the step time a fix could recover (+1 more)   f: details', or
    the longest shorter form that fits in ``room``."""
    extra = f" (+{more} more)" if more > 0 else ""
    return first_fitting(
        room,
        f"{count} ranked by the step time a fix could recover{extra}   f: details",
        f"{count} found, the biggest gain first{extra}   f: details",
        f"{count} found{extra}   f: details",
        f"{count}  f: all",
    )
