"""The capture table: the top GPU kernels or the top CPU ops of the latest capture.

Textual's DataTable re-renders all visible cells on any change, which is why the
monitor's process table draws its own lines; this table changes only when a new
capture arrives (or on a resize), so DataTable's cost does not matter here and
its cursor, scrolling and row keys come for free.  Rows are keyed by the full
kernel / op name, so the cursor stays on its kernel across captures.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist

from gputui import fmt
from gputui.analysis.evidence import CaptureView
from gputui.trace.kernels import short_kernel_name
from gputui.tui.attach.capture_panels import CLASS_SHORT, class_style, us_text

KERNELS = "kernels"
CPU_OPS = "cpu_ops"
#: (key, label, width) of the fixed columns; the name column takes the rest
KERNEL_COLUMNS = (
    ("class", "class", 7),
    ("calls", "calls", 7),
    ("total", "total", 9),
    ("mean", "mean", 9),
    ("share", "% GPU", 7),
)
OP_COLUMNS = (
    ("calls", "calls", 7),
    ("self", "self", 9),
    ("total", "total", 9),
    ("share", "% CPU", 7),
)
MIN_NAME = 16


class CaptureTable(DataTable[Any]):
    DEFAULT_CSS = """
    CaptureTable {
        height: 1fr;
        scrollbar-size-horizontal: 0;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        # No cell padding: the fixed columns are right-aligned numbers that carry their
        # own gap, which leaves ~10 more cells to the kernel names.
        super().__init__(id=id, cursor_type="row", zebra_stripes=False, cell_padding=0)
        self.mode = KERNELS
        self.capture: CaptureView | None = None
        self._shown: tuple[Any, ...] | None = None
        #: row key -> (kind, full name) for the name line
        self.full_names: dict[str, tuple[str, str]] = {}

    @property
    def effective_mode(self) -> str:
        """CPU ops when the capture has no kernels (a CPU job), else the chosen mode."""
        cap = self.capture
        if cap is not None and not cap.kernels and cap.cpu_ops:
            return CPU_OPS
        return self.mode

    def show(self, capture: CaptureView | None) -> None:
        self.capture = capture
        self._rebuild()

    def set_mode(self, mode: str) -> None:
        self.mode = mode
        self._rebuild()

    def on_resize(self) -> None:
        self._rebuild()

    def _name_width(self, fixed: tuple[tuple[str, str, int], ...]) -> int:
        width = self.size.width or self.app.size.width
        # One cell of margin on the left, one for the scrollbar.
        used = sum(w for _k, _l, w in fixed) + 2
        return max(MIN_NAME, width - used)

    def _rebuild(self) -> None:
        cap = self.capture
        mode = self.effective_mode
        fixed = KERNEL_COLUMNS if mode == KERNELS else OP_COLUMNS
        name_w = self._name_width(fixed)
        key = (None if cap is None else cap.id, mode, name_w, cap is None or cap.replayed)
        if key == self._shown:
            return
        self._shown = key
        selected = self._selected_key()
        self.clear(columns=True)
        label = "kernel (short name)" if mode == KERNELS else "CPU op"
        self.add_column(" " + label, key="name", width=name_w)
        for col_key, col_label, col_w in fixed:
            self.add_column(Text(col_label, justify="right"), key=col_key, width=col_w)
        self.full_names = {}
        if cap is not None and mode == KERNELS:
            for k in cap.kernels:
                if k.name in self.full_names:
                    continue
                self.full_names[k.name] = (f"{k.kernel_class} kernel", k.name)
                self.add_row(
                    # Text, not str: DataTable reads markup in a string cell.
                    Text(" " + shorten(fmt.clean(short_kernel_name(k.name)), name_w - 1)),
                    Text(
                        " " + CLASS_SHORT.get(k.kernel_class, k.kernel_class),
                        style=class_style(k.kernel_class),
                    ),
                    _right(f"{k.calls:,}"),
                    _right(us_text(k.total_us)),
                    _right(us_text(k.mean_us)),
                    _right(f"{k.share * 100:.1f}%"),
                    key=k.name,
                )
        elif cap is not None:
            for op in cap.cpu_ops:
                if op.name in self.full_names:
                    continue
                self.full_names[op.name] = ("CPU op", op.name)
                self.add_row(
                    Text(" " + shorten(fmt.clean(op.name), name_w - 1)),
                    _right(f"{op.calls:,}"),
                    _right(us_text(op.self_us)),
                    _right(us_text(op.total_us)),
                    _right(f"{op.share * 100:.1f}%"),
                    key=op.name,
                )
        if selected is not None and selected in self.full_names:
            self.move_cursor(row=self.get_row_index(selected), animate=False)

    def _selected_key(self) -> str | None:
        if not self.row_count:
            return None
        try:
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        except CellDoesNotExist:  # the cursor is on no row: nothing selected
            return None
        return None if key.value is None else str(key.value)

    @property
    def selected_name(self) -> tuple[str, str] | None:
        key = self._selected_key()
        return None if key is None else self.full_names.get(key)

    def names(self) -> list[str]:
        """Row keys top to bottom (tests read this)."""
        return [str(row.key.value) for row in self.ordered_rows]


def shorten(text: str, width: int) -> str:
    """A kernel or op name in ``width`` cells.  Cut from the middle: generated
    kernel names differ at both ends (the library in front, the tile shape or
    layout such as ``_NNT`` / ``_NTT`` at the back); but a short name with its
    functor (``stem<functor>``) reads best from the front."""
    if len(text) <= width:
        return text
    if width < 8 or "<" in text:
        return fmt.truncate(text, width)
    return fmt.middle(text, width)


def _right(value: str) -> Text:
    return Text(value, justify="right")
