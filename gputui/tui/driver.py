"""The terminal driver: Textual's Linux driver, with an input thread that sleeps
until a key comes instead of waking ten times a second.

Textual's input thread waits for the terminal with a 0.1 s time-out, to see
whether it should stop and to let the key parser time out a lone Escape (the
start of a sequence until a moment passes).  An idle monitor paid for those
ten wake-ups a second: a fifth of its CPU time on a 2-core VM.  Here the
thread waits for input without a time-out while the parser waits for nothing;
while it does (an Escape pending), until the parser's own deadline.  Stopping
the input (quit, suspend) wakes it through a pipe of its own.  The wait is
bounded all the same (``IDLE_WAIT_S``), so a missed wake-up costs a delay,
never a hang.  Where Textual's driver lacks what this relies on, Textual's own
driver runs unchanged (:func:`driver_class`).
"""

from __future__ import annotations

import os
import selectors
from codecs import getincrementaldecoder
from typing import Any

from textual.driver import Driver

#: the longest the input thread waits for input in one go (it wakes sooner
#: for a key, for the parser's deadline, or when input stops)
IDLE_WAIT_S = 2.0


def driver_class(stock: type[Driver]) -> type[Driver]:
    """The quiet driver in place of Textual's Linux driver ``stock``; any other
    driver (Windows, one named by TEXTUAL_DRIVER, a headless one) as it is."""
    try:
        from textual._time import get_time
        from textual._xterm_parser import XTermParser
        from textual.drivers.linux_driver import LinuxDriver
    except ImportError:
        return stock
    if stock is not LinuxDriver:
        return stock
    needed = ("run_input_thread", "disable_input", "process_message", "close")
    if not all(hasattr(LinuxDriver, name) for name in needed):
        return stock
    if not hasattr(XTermParser(False), "_timeout_time"):
        return stock

    class QuietLinuxDriver(LinuxDriver):
        _quiet_wake: tuple[int, int] | None = None
        _quiet_stop = False

        def run_input_thread(self) -> None:
            _quiet_input(self, XTermParser, get_time)

        def disable_input(self) -> None:
            self._quiet_stop = True
            wake = self._quiet_wake
            if wake is not None:
                try:
                    os.write(wake[1], b"\0")
                except OSError:
                    pass
            super().disable_input()

        def close(self) -> None:
            super().close()
            wake, self._quiet_wake = self._quiet_wake, None
            if wake is not None:
                for fd in wake:
                    try:
                        os.close(fd)
                    except OSError:
                        pass

    QuietLinuxDriver.__name__ = QuietLinuxDriver.__qualname__ = "QuietLinuxDriver"
    return QuietLinuxDriver


def input_wait(deadline: float | None, now: float) -> float:
    """How long the input thread waits for input: until the parser's
    ``deadline`` (on the parser's clock, as ``now``) where it has one, else
    ``IDLE_WAIT_S``."""
    if deadline is None:
        return IDLE_WAIT_S
    return min(IDLE_WAIT_S, max(0.0, deadline - now))


def _quiet_input(driver: Any, parser_class: Any, clock: Any) -> None:
    """The input thread of :class:`QuietLinuxDriver` (``driver``): the terminal's
    bytes to key and mouse events, as Textual's thread does, waiting only as
    long as the parser needs."""
    if driver._quiet_wake is None:
        driver._quiet_wake = os.pipe()
    driver._quiet_stop = False
    wake_fd = driver._quiet_wake[0]
    fileno = driver.fileno
    parser = parser_class(driver._debug)
    decode = getincrementaldecoder("utf-8")().decode
    selector = selectors.SelectSelector()
    selector.register(fileno, selectors.EVENT_READ)
    selector.register(wake_fd, selectors.EVENT_READ)

    def deliver(events: Any) -> None:
        for event in events:
            driver.process_message(event)

    def read_terminal() -> None:
        data = decode(os.read(fileno, 4096))
        if data:
            deliver(parser.feed(data))
        else:  # stdin piped and at its end: nothing more to wait for there
            selector.unregister(fileno)

    try:
        while not (driver._quiet_stop or driver.exit_event.is_set()):
            ready = selector.select(input_wait(parser._timeout_time, clock()))
            for key, _mask in ready:
                if key.fd == wake_fd:
                    os.read(wake_fd, 64)
                else:
                    read_terminal()
            deliver(parser.tick())
        # a sequence cut short by the stop: what the parser makes of it (Textual
        # leaves the rest of the terminal's input to its flush)
        deliver(parser.tick())
    finally:
        selector.close()
        try:
            for _event in parser.feed(""):
                pass
        except Exception:  # the parser at its end: nothing more to deliver
            pass
