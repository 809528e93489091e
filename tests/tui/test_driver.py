"""The monitor's input thread sleeps while no key comes (gputui/tui/driver.py):
keys still arrive, a lone Escape still times out into a key, stopping wakes it,
and the real app in a terminal quits on ``q``."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.drivers.headless_driver import HeadlessDriver
from textual.drivers.linux_driver import LinuxDriver
from textual.events import Key

from gputui.tui import driver as quiet
from tests.helpers.hookutil import wait_for

REPO = Path(__file__).resolve().parents[2]


class FakeDriver:
    """What the input thread uses of a driver: the terminal (a pipe here), the
    exit event, and where events go."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self.fileno = self.read_fd
        self.exit_event = threading.Event()
        self._debug = False
        self._quiet_wake: tuple[int, int] | None = None
        self._quiet_stop = False
        self.events: list[Any] = []

    def process_message(self, event: Any) -> None:
        self.events.append(event)

    def keys(self) -> list[str]:
        return [e.key for e in self.events if isinstance(e, Key)]


@pytest.fixture
def running(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The input thread on a FakeDriver, its waits counted; the thread is
    stopped (through the wake pipe) at the end."""
    waits: list[float] = []
    real = quiet.input_wait

    def counted(deadline: float | None, now: float) -> float:
        waits.append(real(deadline, now))
        return waits[-1]

    monkeypatch.setattr(quiet, "input_wait", counted)
    monkeypatch.setattr(quiet, "IDLE_WAIT_S", 600.0)  # only a key or a stop wakes it
    fake = FakeDriver()
    thread = threading.Thread(target=quiet._quiet_input, args=(fake, XTermParser, get_time))
    thread.start()
    wait_for(lambda: fake._quiet_wake is not None and waits, 30, "the thread waiting")
    try:
        yield fake, waits, thread
    finally:
        fake._quiet_stop = True
        if fake._quiet_wake is not None:
            os.write(fake._quiet_wake[1], b"\0")
        thread.join(30)
        for fd in (fake.read_fd, fake.write_fd, *(fake._quiet_wake or ())):
            os.close(fd)


def test_keys_arrive_and_the_idle_thread_does_not_wake(running: Any) -> None:
    fake, waits, thread = running
    os.write(fake.write_fd, b"ab")
    wait_for(lambda: fake.keys() == ["a", "b"], 30, "two keys")
    woken = len(waits)
    time.sleep(0.5)  # idle: a thread on a time-out would have woken here
    assert len(waits) == woken
    assert thread.is_alive()


def test_a_lone_escape_becomes_a_key_on_the_parsers_deadline(running: Any) -> None:
    fake, waits, _thread = running
    os.write(fake.write_fd, b"\x1b")
    # the idle wait is 600 s here: the key comes from the parser's own deadline
    wait_for(lambda: fake.keys() == ["escape"], 30, "the escape key")
    assert any(w < 1.0 for w in waits)


def test_stopping_wakes_the_thread(running: Any) -> None:
    fake, _waits, thread = running
    fake._quiet_stop = True
    assert fake._quiet_wake is not None
    os.write(fake._quiet_wake[1], b"\0")
    thread.join(30)
    assert not thread.is_alive()


def test_a_missed_wake_up_costs_a_delay_not_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quiet, "IDLE_WAIT_S", 0.2)
    fake = FakeDriver()
    thread = threading.Thread(target=quiet._quiet_input, args=(fake, XTermParser, get_time))
    thread.start()
    wait_for(lambda: fake._quiet_wake is not None, 30, "the thread")
    fake.exit_event.set()  # as Textual stops it, without the pipe
    thread.join(30)
    assert not thread.is_alive()
    for fd in (fake.read_fd, fake.write_fd, *(fake._quiet_wake or ())):
        os.close(fd)


def test_the_end_of_piped_input_stops_the_reads(running: Any) -> None:
    fake, waits, thread = running
    os.write(fake.write_fd, b"x")
    os.close(fake.write_fd)
    fake.write_fd = os.open(os.devnull, os.O_RDONLY)  # closed by the fixture instead
    wait_for(lambda: fake.keys() == ["x"], 30, "the key")
    woken = len(waits)
    time.sleep(0.3)  # at the end of the pipe: no wake-up loop on its end
    assert len(waits) <= woken + 1 and thread.is_alive()


def test_only_textuals_linux_driver_is_replaced() -> None:
    chosen = quiet.driver_class(LinuxDriver)
    assert chosen is not LinuxDriver and issubclass(chosen, LinuxDriver)
    assert quiet.driver_class(HeadlessDriver) is HeadlessDriver


def test_the_wait_is_the_parsers_deadline_or_the_idle_bound() -> None:
    assert quiet.input_wait(None, 5.0) == quiet.IDLE_WAIT_S
    assert quiet.input_wait(5.05, 5.0) == pytest.approx(0.05)
    assert quiet.input_wait(4.0, 5.0) == 0.0
    assert quiet.input_wait(1e9, 5.0) == quiet.IDLE_WAIT_S


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a Linux terminal")
def test_the_monitor_in_a_terminal_answers_keys_and_quits() -> None:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", PYTHONPATH=str(REPO))
    env.pop("TEXTUAL_DRIVER", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputui", "--demo", "--interval", "1"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        start_new_session=True,
    )
    os.close(slave)
    seen = bytearray()

    def pump() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                return
            if not data:
                return
            seen.extend(data)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        wait_for(lambda: b"DEMO" in seen, 120, "the monitor's first screen")
        # its event loop and Textual came without OpenSSL, bz2 or lzma
        # (gputui.tui.footprint)
        with open(f"/proc/{proc.pid}/maps") as fh:
            maps = fh.read()
        for library in ("libssl", "_ssl", "_bz2", "libbz2", "_lzma", "liblzma"):
            assert library not in maps
        os.write(master, b"?")
        wait_for(lambda: b"gputui keys" in seen, 60, "the help screen")
        os.write(master, b"q")  # closes the help
        time.sleep(0.5)
        os.write(master, b"q")  # quits
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        os.close(master)
