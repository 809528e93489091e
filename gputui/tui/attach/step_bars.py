"""The attach screen's step bars: the newest steps as stacked columns by phase,
their marks (profiled, warm-up, slow), the step-time history and the outliers."""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.text import Text

from gputui import fmt
from gputui.analysis.steps import SLOW_FACTOR
from gputui.session.attach import AttachView, StepColumn
from gputui.tui import render
from gputui.tui.attach.phases import phase_letter, phase_style
from gputui.tui.attach.view_panel import ViewPanel
from gputui.tui.render import join_parts


class StepBars(ViewPanel):
    """The newest steps as stacked columns by phase, their marks, history and outliers."""

    def __init__(self, *, id: str | None = None, ascii_only: bool = False) -> None:
        super().__init__(id=id, ascii_only=ascii_only)
        self.bar_rows = 9
        self.history_rows = 2

    def build(self, width: int) -> Text:
        v = self.view
        title = Text()
        mode = "GPU" if v is not None and v.gpu_mode else "wall"
        title.append(f"Step {mode}", style="bold")
        if v is None or not v.columns:
            title.append("  waiting for steps", style="dim")
            return title
        cols = v.columns[-max(1, width) :]
        top = _scale(cols)
        extra = [
            (f"{len(cols)} steps, top {fmt.ms(top)}", "dim"),
            ("P", "bold magenta"),
            ("profiled", "dim"),
            ("w", "bold yellow"),
            ("warm-up", "dim"),
            ("!", "bold red"),
            (f">{SLOW_FACTOR:g}x p50", "dim"),
        ]
        title.append("  ")
        join_parts(title, extra, width)
        lines = [title]
        lines.extend(self._bars(cols, top, v.phases))
        lines.append(self._marks(cols))
        lines.extend(self._history(v, width))
        lines.append(self._outliers(v, width))
        return Text("\n").join(lines)

    def _bars(self, cols: Sequence[StepColumn], top: float, order: Sequence[str]) -> list[Text]:
        height = self.bar_rows
        grid: list[list[tuple[str, str]]] = [[] for _ in range(height)]
        styles = {name: phase_style(name, order) for name in order}
        for col in cols:
            cells = _column_cells(col, top, height, styles, self.ascii_only)
            for row in range(height):
                grid[row].append(cells[row])
        # Runs of one style become one span: ~10x fewer spans than cells.
        lines = []
        for row in reversed(range(height)):
            text = Text()
            run_style = ""
            run: list[str] = []
            for char, style in grid[row]:
                if style != run_style and run:
                    text.append("".join(run), style=run_style)
                    run = []
                run_style = style
                run.append(char)
            if run:
                text.append("".join(run), style=run_style)
            lines.append(text)
        return lines

    def _marks(self, cols: Sequence[StepColumn]) -> Text:
        text = Text()
        for col in cols:
            if col.profiled:
                text.append("P", style="bold magenta")
            elif col.warmup:
                text.append("w", style="bold yellow")
            elif col.slow:
                text.append("!", style="bold red")
            else:
                text.append(" ")
        return text

    def _history(self, v: AttachView, width: int) -> list[Text]:
        stats = v.stats
        top = None
        if stats.wall is not None and math.isfinite(stats.wall.p99):
            # The p99 sets the scale: a 2 s warm-up step must not flatten the graph.
            top = stats.wall.p99 * 1.5
        graph_w = max(8, width - 15)
        rows = [("wall", v.history_wall, "cyan")]
        if v.history_gpu and self.history_rows > 1:
            rows.append(("GPU", v.history_gpu, "green"))
        lines = []
        for label, values, style in rows[: self.history_rows]:
            line = Text(f"{label:<5}", style="bold")
            line.append_text(render.sparkline(list(values), graph_w, top, self.ascii_only, style))
            line.append(fmt.ms(values[-1] if values else None).rjust(9))
            lines.append(line)
        return lines

    def _outliers(self, v: AttachView, width: int) -> Text:
        text = Text()
        p50 = v.stats.wall.p50 if v.stats.wall is not None else None
        if not v.outliers:
            p50_text = fmt.ms(p50)
            text.append(
                render.first_fitting(
                    width,
                    f"no outliers (slower than {SLOW_FACTOR:g}x p50 {p50_text}) in the window",
                    f"no outliers (slower than {SLOW_FACTOR:g}x p50 {p50_text})",
                    f"no outliers (>{SLOW_FACTOR:g}x p50 {p50_text})",
                    "no outliers",
                ),
                "dim",
            )
            return text
        text.append("outliers ", style="bold")
        parts = []
        for o in v.outliers:
            if o.why == "slow" and p50:
                parts.append((f"#{o.index} {fmt.ms(o.wall_s)} ({o.wall_s / p50:.0f}x p50)", "red"))
            else:
                parts.append((f"#{o.index} {fmt.ms(o.wall_s)} {o.why}", "yellow"))
        join_parts(text, parts, width)
        return text


def _scale(cols: Sequence[StepColumn]) -> float:
    """Bar height: the tallest ordinary step, so outliers are clipped, not the norm."""
    ordinary = [c.total_s for c in cols if not (c.warmup or c.slow or c.profiled)]
    values = ordinary or [c.total_s for c in cols]
    top = max(values) if values else 0.0
    return top * 1.05 if top > 0 else 1e-9


def _column_cells(
    col: StepColumn, top: float, height: int, styles: dict[str, str], ascii_only: bool
) -> list[tuple[str, str]]:
    """(char, style) from the bottom row up, in eighths of a cell.  Each cell takes
    the phase at its middle; the top cell is a partial block.  Hot at 1,000 steps/s
    (every column is new each frame), hence the plain loop."""
    units = height * 8
    scale = units / top
    total = col.total_s * scale
    segments = col.segments
    if not segments:
        return [_BLANK] * height
    bounds = []
    acc = 0.0
    for _name, seconds in segments:
        acc += seconds * scale
        bounds.append(acc)
    last = len(bounds) - 1
    k = 0
    cells: list[tuple[str, str]] = []
    for row in range(height):
        low = row * 8
        if total <= low + 0.5:
            cells.extend([_BLANK] * (height - row))
            break
        if row == height - 1 and total > units:
            cells.append(_CLIP_ASCII if ascii_only else _CLIP)
            break
        filled = total - low
        if filled > 8.0:
            filled = 8.0
        middle = low + filled / 2
        while k < last and middle >= bounds[k]:
            k += 1
        name = segments[k][0]
        style = styles.get(name, "")
        if ascii_only:
            cells.append((phase_letter(name) if filled >= 4 else " ", style))
        else:
            eighths = round(filled)
            cells.append((render.EIGHTHS[eighths if eighths > 0 else 1], style))
    return cells


_BLANK = (" ", "")
_CLIP = ("▲", "bold red")
_CLIP_ASCII = ("^", "bold red")
