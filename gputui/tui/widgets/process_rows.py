"""One process-table row as Rich would render it: its cells (:func:`cells`, from a
:class:`~gputui.session.process_view.Row`), as a Text (:func:`line_text`) and,
for the common rows, as its segments made directly (:func:`row_segments`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from gputui import fmt
from gputui.session import container_text, slurm_text
from gputui.session.process_view import (
    MAX_COMMAND_CHARS,
    TYPE_SHORT,
    Row,
    display_command,
    time_text,
)
from gputui.snapshot.model import ProcessSnapshot
from gputui.tui import render


def _one_cell(character: str) -> bool:
    return cell_len(character) == 1


def cells(
    row: Row,
    now_s: float,
    ascii_only: bool = False,
    parent_name: str | None = None,
) -> tuple[Any, ...]:
    """The cells of one row, in COLUMNS order."""
    proc = row.proc
    if proc is None:
        name = (
            fmt.clean(parent_name, MAX_COMMAND_CHARS) if parent_name else "(parent, not on a GPU)"
        )
        return (
            "",
            "",
            str(row.pid),
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            Text(row.prefix + name, style="dim"),
        )
    mark = ("@" if ascii_only else "◆") if proc.hooked else ""
    command = row.prefix + display_command(proc)
    return (
        Text(mark, style="bold magenta"),
        str(proc.gpu_index),
        str(proc.pid),
        fmt.clean(proc.user, 64),
        TYPE_SHORT.get(proc.type, proc.type),
        Text(fmt.size(proc.gpu_mem_bytes), justify="right"),
        _pct_cell(proc.sm_pct),
        _pct_cell(proc.mem_bw_pct),
        Text("-" if proc.cpu_pct is None else f"{proc.cpu_pct:.0f}", justify="right"),
        Text(fmt.size(proc.rss_bytes), justify="right"),
        time_cell(proc, now_s),
        Text(container_text.label(proc), style="dim" if proc.pid_is_host else ""),
        slurm_text.label(proc),
        command,
    )


def time_cell(proc: ProcessSnapshot, now_s: float) -> Text:
    """A process's TIME cell."""
    return Text(time_text(proc, now_s), justify="right")


def _pct_cell(value: float | None) -> Text:
    if value is None:
        return Text("-", style="dim", justify="right")
    return Text(f"{value:.0f}", style=render.level_style(value), justify="right")


#: the command column is at least this wide; the others are fixed
MIN_COMMAND = 12
_RIGHT = {"pid", "gpu_mem", "sm", "bw", "cpu", "rss", "time"}


def line_text(
    columns: list[str],
    values: tuple[Any, ...],
    widths: list[int],
    style: Style | None,
    ascii_only: bool,
) -> Text:
    """One row (or the header) as a Rich Text: each cell padded to its column's
    width (right-aligned in ``_RIGHT``), cut with an ellipsis where longer,
    ``style`` (the cursor's) under the cells' own."""
    line = Text(no_wrap=True, overflow="crop", end="")
    for i, (column, value, width) in enumerate(zip(columns, values, widths, strict=True)):
        if i:
            # Between columns only: a space after the last one made every line a
            # cell too wide, and cropping a line with a non-ASCII character (an
            # ellipsis) costs Rich a walk over each character.
            line.append(" ")
        text = value if isinstance(value, Text) else Text(str(value))
        plain = text.plain
        cells = len(plain) if plain.isascii() else text.cell_len
        if cells > width:
            # Cut with an ellipsis, so a cut command never reads as a whole one.
            text = text.copy()
            text.truncate(max(0, width - 1))
            text.append(fmt.ellipsis(ascii_only))
            cells = text.cell_len
        pad = " " * max(0, width - cells)
        if column in _RIGHT:
            line.append(pad)
            line.append_text(text)
        else:
            line.append_text(text)
            line.append(pad)
    if style is not None:
        # Under the cells' own colours, so a red %SM stays red on the cursor row.
        line.stylize_before(style)
    return line


def row_segments(
    columns: list[str],
    values: tuple[Any, ...],
    widths: list[int],
    cursor: Style | None,
    ascii_only: bool,
    get_style: Callable[..., Style],
) -> list[Segment] | None:
    """The segments Rich renders :func:`line_text`'s row into, built directly
    (a refresh draws every changed row: Rich's general path costs several times
    more); None for a row with a cell of spans, control characters or characters
    not one cell wide (wide, combining), which Rich lays out.  The same segments
    as Rich's, split where Rich splits them: at each styled cell's ends, an empty
    one too."""
    out: list[Segment] = []
    run = ""  # unstyled text since the last styled cell
    ellipsis = fmt.ellipsis(ascii_only)
    null = Style.null()
    # Rich gives unstyled text the line's (null) style, or the cursor's; a line
    # with no style at all is one segment without one
    plain_style = null if cursor is None else cursor
    styled = False  # a styled cell, even an empty one, is a span of Rich's
    for i, (column, value, width) in enumerate(zip(columns, values, widths, strict=True)):
        if i:
            run += " "
        if isinstance(value, Text):
            if value.spans:
                return None
            plain, style = value.plain, value.style
        else:
            plain, style = str(value), ""
        if not plain.isprintable():  # control characters: Rich strips them
            return None
        if not plain.isascii() and not all(map(_one_cell, plain)):
            return None  # wide or zero-width characters: Rich measures those
        if len(plain) > width:
            plain = plain[: max(0, width - 1)] + ellipsis  # the ellipsis is one cell
        pad = " " * max(0, width - len(plain))
        right = column in _RIGHT
        if right:
            run += pad
        if style:
            styled = True
            if run:
                out.append(Segment(run, plain_style))
                run = ""
            if plain:
                own = get_style(style, default=null)
                out.append(Segment(plain, own if cursor is None else cursor + own))
        else:
            run += plain
        if not right:
            run += pad
    if not styled and (cursor is None or not run):  # no span (the cursor's needs text)
        return [Segment(run)]
    if run:
        out.append(Segment(run, plain_style))
    return out
