"""The monitor's compositor draws only the lines an update writes.  What reaches
the terminal must still be the screen: after every update, a terminal that has
taken each update in turn shows what a full drawing of the screen shows."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from rich.cells import cell_len
from rich.console import Console
from textual._compositor import Compositor, CompositorUpdate
from textual.strip import Strip

from gputui.recording.replay import ReplaySource
from gputui.tui.app import make_app
from gputui.tui.compositor import LineCompositor
from gputui.tui.screens import monitor

#: between snapshots, keys that move the cursor, sort, open a screen over the
#: monitor and close it, show the tree and go to the last row
KEYS = {3: ["down"], 5: ["s"], 7: ["question_mark"], 8: ["escape"], 10: ["t"], 12: ["end"]}
TERMINAL = Console(color_system="truecolor", force_terminal=True, legacy_windows=False)
TOKEN = re.compile(r"\x1b\[(\d+);(\d+)H|(\x1b\[[0-9;]*m)|\n|([^\x1b\n]+)")


class Terminal:
    """Cells (character and the SGR in force) as a terminal would hold them."""

    def __init__(self, width: int, height: int) -> None:
        self.cells = [[(" ", "")] * width for _ in range(height)]
        self.x = self.y = 0
        self.sgr = ""

    def feed(self, data: str) -> None:
        for match in TOKEN.finditer(data):
            row, column, sgr, text = match.groups()
            if row is not None:
                self.y, self.x = int(row) - 1, int(column) - 1
            elif sgr is not None:
                self.sgr = "" if sgr == "\x1b[0m" else self.sgr + sgr
            elif text is not None:
                for character in text:
                    self.cells[self.y][self.x] = (character, self.sgr)
                    self.x += cell_len(character)

    def screen_text(self) -> list[str]:
        return ["".join(c for c, _ in line) for line in self.cells]


def _drawn_whole(compositor: Compositor, width: int, height: int) -> Terminal:
    """The screen as Textual's own compositor draws all of it now."""
    chops = Compositor._render_chops(compositor, compositor.size.region, lambda y: True)
    whole = Terminal(width, height)
    for y, chop in enumerate(chops[:height]):
        whole.feed(f"\x1b[{y + 1};1H" + Strip.join(chop.values()).render(TERMINAL) + "\x1b[0m")
    return whole


async def _check(line: bool, size: tuple[int, int], monkeypatch: Any) -> dict[str, int]:
    if not line:
        monkeypatch.setattr(monitor, "use_line_compositor", lambda screen: False)
    app = make_app(ReplaySource.demo(), interval_s=3600.0, autostart=False)
    width, height = size
    terminal = Terminal(width, height)
    counts = {"partial": 0, "whole": 0, "compared": 0}
    display = app._display

    def capture(screen: Any, update: Any) -> None:
        if isinstance(update, CompositorUpdate):
            data = update.render_segments(TERMINAL)
            terminal.feed(data + "\x1b[0m")
            terminal.sgr = ""
            counts["whole" if data.count("\n") >= height - 1 else "partial"] += 1
        display(screen, update)

    app._display = capture  # type: ignore[method-assign]

    async def settled() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            await pilot.pause()
            screen = app.screen
            if not screen._compositor._dirty_regions and not screen._dirty_widgets:
                break
        screen = app.screen
        whole = _drawn_whole(screen._compositor, width, height)
        assert terminal.cells == whole.cells, "\n".join(
            f"{a!r}\n{b!r}"
            for a, b in zip(terminal.screen_text(), whole.screen_text(), strict=True)
            if a != b
        )
        counts["compared"] += 1

    async with app.run_test(size=size) as pilot:
        await settled()
        assert type(app.screen._compositor) is (LineCompositor if line else Compositor)
        for step in range(14):
            app.advance()
            await settled()
            for key in KEYS.get(step, []):
                await pilot.press(key)
                await settled()
    monkeypatch.undo()
    return counts


@pytest.mark.parametrize("line", [True, False], ids=["line compositor", "Textual's (control)"])
@pytest.mark.parametrize("size", [(120, 40), (90, 24)])
async def test_the_terminal_shows_the_screen_after_every_update(
    line: bool, size: tuple[int, int], monkeypatch: Any
) -> None:
    counts = await _check(line, size, monkeypatch)
    assert counts["compared"] >= 20
    assert counts["partial"] >= 14  # a few lines each: what the line compositor changes


def test_a_compositor_it_was_not_written_for_is_left_alone() -> None:
    class Other(Compositor):
        pass

    class Screen:
        _compositor: Compositor = Other()

    screen: Any = Screen()
    assert not monitor.use_line_compositor(screen)
    assert type(screen._compositor) is Other
