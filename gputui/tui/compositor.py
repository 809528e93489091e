"""A compositor that draws only the lines an update repaints.

When some lines of a screen change, Textual's compositor takes the box around
every changed line and asks each widget whose *clip* meets that box for its lines.
A widget placed directly on the screen has the whole screen as its clip, so it
meets every box and draws all of its lines: the process table its 30 rows, the
footer its line, when only the header's clock and one row changed.  The lines
outside the changed ones are then thrown away.

Here a widget draws only the rows, between its first and its last, that the update
writes; a widget with no such row, or whose part of each such row is already
drawn by widgets in front of it, is not asked at all.  The lines written are the
same; only the work behind them is less (``tests/tui/test_tui_compositor.py``: after
every update of the monitor, a terminal that took each update shows what a whole
drawing of the screen shows).  Where this Textual has not the compositor this class
was written for, the screen keeps Textual's own.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from textual._compositor import Compositor
from textual.geometry import Region

if TYPE_CHECKING:
    from textual.screen import Screen
    from textual.strip import Strip


class LineCompositor(Compositor):
    def _render_chops(
        self,
        crop: Region,
        is_rendered_line: Callable[[int], bool],
    ) -> Sequence[Mapping[int, Strip]]:
        cuts = self.cuts
        # per screen line: the strip that starts at each cut, front-most widget first
        chops: list[dict[int, Strip | None]] = [dict.fromkeys(line[:-1]) for line in cuts]
        written = [y for y in range(crop.y, crop.bottom) if is_rendered_line(y)]
        if not written:
            return chops  # type: ignore[return-value]
        overlaps = crop.overlaps
        for widget, (region, clip) in self.visible_widgets.items():
            if not overlaps(clip):
                continue
            shown = region.intersection(clip)
            if not shown.width:
                continue
            left, right = shown.x, shown.right
            # the written rows where some of this widget's span is not yet taken by a
            # widget in front (for the screen and the containers behind the panels,
            # usually none: they are not asked)
            rows = [
                y
                for y in written[bisect_left(written, shown.y) : bisect_left(written, shown.bottom)]
                if any(chops[y][cut] is None for cut in cuts[y] if left <= cut < right)
            ]
            if not rows:
                continue
            start = rows[0]
            part = Region(shown.x - region.x, start - region.y, shown.width, rows[-1] + 1 - start)
            strips = widget.render_lines(part)
            for y in rows:
                line = chops[y]
                edges = [cut for cut in cuts[y] if left <= cut <= right]
                pieces = strips[y - start].divide([cut - left for cut in edges[1:]])
                for cut, piece in zip(edges, pieces, strict=False):
                    if line.get(cut) is None:
                        line[cut] = piece
        return chops  # type: ignore[return-value]


def use_line_compositor(screen: Screen[object]) -> bool:
    """Give ``screen`` the line compositor, if this Textual's compositor is the one
    it was written for; False where the screen keeps Textual's own."""
    current = getattr(screen, "_compositor", None)
    if type(current) is not Compositor or not callable(getattr(current, "_render_chops", None)):
        return False
    screen._compositor = LineCompositor()
    return True
