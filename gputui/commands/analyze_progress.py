"""The progress bar of ``gputui analyze`` while it reads traces: on stderr, only
when stderr is a terminal, and only once the load has taken more than a second
(a small trace prints nothing).  One line, redrawn in place, erased at the end:
bytes of the files read, events decoded, ranks done; then, while a file read
in this process is summarized (seconds for a gigabyte), a line that says so."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

from gputui import fmt

#: a load shorter than this shows no bar
SHOW_AFTER_S = 1.0
#: the fastest the line is redrawn
REDRAW_S = 0.1
BAR_CELLS = 24


def _events(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1e6:.1f} M events"
    if n >= 10_000:
        return f"{n / 1e3:.0f} k events"
    return f"{n:,} events"


class LoadProgress:
    """Draws the bar on ``stream`` (when it is a terminal).  ``after_s`` and
    ``clock`` are the threshold and the clock: a test gives its own."""

    def __init__(
        self,
        total_bytes: int,
        ranks: int,
        stream: TextIO,
        *,
        after_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total_bytes = max(total_bytes, 1)
        self.ranks = ranks
        self.stream = stream
        self.clock = clock
        self.after_s = SHOW_AFTER_S if after_s is None else after_s
        try:
            self.enabled = stream.isatty()
        except (AttributeError, ValueError, OSError):
            self.enabled = False
        self.started = clock()
        self.drawn_at: float | None = None
        self.drawn = ""  # the line on the screen
        self.width = 0

    def line(self, bytes_read: int, events: int, ranks_done: int) -> str:
        share = min(max(bytes_read / self.total_bytes, 0.0), 1.0)
        full = int(share * BAR_CELLS)
        bar = "#" * full + "." * (BAR_CELLS - full)
        text = (
            f"gputui analyze: reading [{bar}] {share * 100:3.0f}%  "
            f"{fmt.size(bytes_read)} of {fmt.size(self.total_bytes)}  {_events(events)}"
        )
        if self.ranks > 1:
            text += f"  {ranks_done}/{self.ranks} ranks"
        return text

    def update(self, bytes_read: int, events: int, ranks_done: int = 0) -> None:
        """The bar at ``bytes_read``: redrawn at most every :data:`REDRAW_S`,
        but always once every byte is read (the last batches' events)."""
        self._draw(
            lambda: self.line(bytes_read, events, ranks_done),
            at_once=bytes_read >= self.total_bytes,
        )

    def summarizing(self, bytes_read: int, events: int, ranks_done: int = 0) -> None:
        """The line while the file just read is summarized: drawn at once, as
        nothing moves until the summary is made."""
        text = f"gputui analyze: summarizing  {fmt.size(bytes_read)} read  {_events(events)}"
        if self.ranks > 1:
            text += f"  {ranks_done}/{self.ranks} ranks"
        self._draw(lambda: text, at_once=True)

    def _draw(self, text_of: Callable[[], str], at_once: bool) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if now - self.started < self.after_s:
            return
        if not at_once and self.drawn_at is not None and now - self.drawn_at < REDRAW_S:
            return
        text = text_of()
        if text == self.drawn:
            return  # (said again and again while a summary is made)
        self.drawn_at = now
        self.drawn = text
        pad = " " * max(self.width - len(text), 0)
        self.width = len(text)
        self._write("\r" + text + pad)

    def close(self) -> None:
        """Erase the line, if one was drawn."""
        if self.drawn_at is not None:
            self._write("\r" + " " * self.width + "\r")
            self.drawn_at = None
            self.drawn = ""

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: no bar, no error
            self.enabled = False
