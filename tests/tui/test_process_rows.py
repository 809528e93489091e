"""The process table draws its common rows without Rich's Text layout; what it
draws must be exactly what Rich renders from the same row (segments, styles,
splits), for any cells, widths and cursor."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.style import Style
from rich.text import Text

from gputui.tui.widgets.process_rows import _RIGHT, line_text, row_segments

CONSOLE = Console(width=200, color_system="truecolor")
COLUMNS = ["mark", "gpu", "pid", "user", "type", "gpu_mem", "sm", "bw", "cpu", "command"]
STYLES = ["", "dim", "bold magenta", "red", "green", "bold yellow", Style(color="cyan")]

ascii_text = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=14)
any_text = st.text(max_size=14)


@st.composite
def cells(draw: Any, text: Any = ascii_text) -> Any:
    plain = draw(text)
    kind = draw(st.sampled_from(["str", "text", "spans"]))
    if kind == "str":
        return plain
    cell = Text(plain, style=draw(st.sampled_from(STYLES)), justify="right")
    if kind == "spans" and plain:
        cell.stylize("underline", 0, max(1, len(plain) // 2))
    return cell


rows = st.lists(st.tuples(st.sampled_from(COLUMNS), cells(), st.integers(0, 12)), max_size=10)
cursors = st.sampled_from([None, Style(bgcolor="blue"), Style(reverse=True, bold=True)])


def _rich(
    columns: list[str], values: tuple[Any, ...], widths: list[int], cursor: Any, ascii_only: bool
) -> list[Any]:
    return list(line_text(columns, values, widths, cursor, ascii_only).render(CONSOLE))


@settings(max_examples=400, deadline=None)
@given(rows, cursors, st.booleans())
def test_a_row_drawn_directly_is_what_rich_renders(row: Any, cursor: Any, ascii_only: bool) -> None:
    columns = [c for c, _, _ in row]
    values = tuple(v for _, v, _ in row)
    widths = [w for _, _, w in row]
    direct = row_segments(columns, values, widths, cursor, ascii_only, CONSOLE.get_style)
    rich = _rich(columns, values, widths, cursor, ascii_only)
    if any(isinstance(v, Text) and v.spans for v in values):
        assert direct is None  # Rich lays those out
    else:
        assert direct == rich


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(COLUMNS), cells(any_text), st.integers(0, 12)), max_size=8),
    cursors,
)
def test_wide_or_control_text_is_left_to_rich_or_drawn_the_same(row: Any, cursor: Any) -> None:
    columns = [c for c, _, _ in row]
    values = tuple(v for _, v, _ in row)
    widths = [w for _, _, w in row]
    direct = row_segments(columns, values, widths, cursor, False, CONSOLE.get_style)
    if direct is not None:
        assert direct == _rich(columns, values, widths, cursor, False)


def test_a_typical_row_is_drawn_directly() -> None:
    columns = ["gpu", "pid", "sm", "command"]
    values = ("0", "4242", Text("97", style="red", justify="right"), "python train.py --lr 3e-4")
    widths = [3, 7, 4, 12]
    direct = row_segments(columns, values, widths, None, False, CONSOLE.get_style)
    assert direct is not None and direct == _rich(columns, values, widths, None, False)
    assert "".join(s.text for s in direct) == "0      4242   97 python trai…"
    assert "sm" in _RIGHT


def test_a_row_with_one_cell_symbols_is_drawn_directly() -> None:
    # the hooked process's marker, a tree's branches, an ellipsis: one cell each
    columns = ["mark", "pid", "command"]
    values = (Text("◆", style="bold magenta"), "4242", "├─ python train.py …")
    widths = [1, 7, 12]
    direct = row_segments(columns, values, widths, Style(bgcolor="blue"), False, CONSOLE.get_style)
    assert direct is not None
    assert direct == _rich(columns, values, widths, Style(bgcolor="blue"), False)


def test_wide_and_zero_width_characters_are_left_to_rich() -> None:
    # as many characters as cells, but not one cell each: Rich cuts them otherwise
    for plain in ("中\u0301x", "e\u0301中", "日本"):
        row = (["command"], (plain,), [2])
        assert row_segments(*row, None, False, CONSOLE.get_style) is None
