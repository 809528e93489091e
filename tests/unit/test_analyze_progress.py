"""The progress bar of ``gputui analyze``: drawn on a terminal once a load has
taken longer than the threshold, never on a pipe or a file."""

from __future__ import annotations

import io
import os
import pty
import threading
from collections.abc import Iterator
from multiprocessing import resource_tracker
from pathlib import Path

import pytest

from gputui.cli import main
from gputui.commands import analyze_progress
from gputui.commands.analyze_progress import LoadProgress
from tests.helpers.deadlines import WAIT_S

DATA = Path(__file__).resolve().parents[1] / "data"


class Terminal:
    """A pty: ``writer`` is its terminal end, everything written is collected."""

    def __init__(self) -> None:
        self.master, slave = pty.openpty()
        self.writer = os.fdopen(slave, "w", buffering=1)
        self.chunks: list[bytes] = []
        self.reader = threading.Thread(target=self._drain, daemon=True)
        self.reader.start()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.master, 4096)
            except OSError:  # the terminal end is closed
                return
            if not data:
                return
            self.chunks.append(data)

    def output(self) -> str:
        """Everything written, once the terminal end is closed."""
        self.writer.close()
        self.reader.join(WAIT_S)
        assert not self.reader.is_alive()
        os.close(self.master)
        return b"".join(self.chunks).decode()


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    t = Terminal()
    yield t
    if not t.writer.closed:
        t.writer.close()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_nothing_is_drawn_before_the_threshold(terminal: Terminal) -> None:
    clock = Clock()
    bar = LoadProgress(1000, 1, terminal.writer, after_s=1.0, clock=clock)
    assert bar.enabled
    clock.now += 0.9
    bar.update(500, 10)
    bar.close()
    assert terminal.output() == ""


def test_a_longer_load_draws_one_line_and_erases_it(terminal: Terminal) -> None:
    clock = Clock()
    bar = LoadProgress(200 << 20, 4, terminal.writer, after_s=1.0, clock=clock)
    clock.now += 1.5
    bar.update(50 << 20, 1_234_567, 1)
    clock.now += 0.01  # faster than the redraw: not drawn
    bar.update(60 << 20, 1_300_000, 1)
    clock.now += 0.5
    bar.update(100 << 20, 2_500_000, 2)
    bar.close()
    out = terminal.output()
    lines = out.split("\r")
    assert lines[0] == "" and lines[-1] == ""
    drawn = [line.rstrip() for line in lines[1:-2]]
    assert len(drawn) == 2
    assert drawn[0].startswith("gputui analyze: reading [######..................]  25%")
    assert "1.2 M events" in drawn[0] and "1/4 ranks" in drawn[0]
    assert " 50%" in drawn[1] and "2/4 ranks" in drawn[1]
    assert lines[-2].strip() == ""  # erased: spaces over the line
    assert "\n" not in out


def test_the_summary_and_the_last_bytes_are_drawn_at_once(terminal: Terminal) -> None:
    """A file read, the bar at 100% and then the summary's line are drawn even
    within the redraw interval: nothing moves after them for seconds."""
    clock = Clock()
    bar = LoadProgress(200 << 20, 4, terminal.writer, after_s=1.0, clock=clock)
    clock.now += 1.5
    bar.update(50 << 20, 1_234_567, 0)
    clock.now += 0.01
    bar.update(60 << 20, 1_300_000, 0)  # (the control: within the interval, not drawn)
    bar.update(200 << 20, 2_500_000, 0)
    clock.now += 0.01
    bar.summarizing(200 << 20, 2_500_000, 1)
    bar.close()
    drawn = [line.rstrip() for line in terminal.output().split("\r")[1:-2]]
    assert len(drawn) == 3, drawn
    assert "100%  200MiB of 200MiB  2.5 M events" in drawn[1]
    assert drawn[2] == "gputui analyze: summarizing  200MiB read  2.5 M events  1/4 ranks"


def test_the_ranks_say_summarizing_once_every_file_is_read(terminal: Terminal) -> None:
    """Rank files read by workers: the bar while bytes are read; once every
    byte is, the workers are making the summaries, and the line says so (once
    for each count of ranks done, however often the loop asks)."""
    from gputui.commands.analyze_load import _said

    clock = Clock()
    bar = LoadProgress(400 << 20, 4, terminal.writer, after_s=1.0, clock=clock)
    clock.now += 1.5
    _said(bar, 300 << 20, 3_000_000, 0)
    for _ in range(3):  # (the loop wakes every tenth of a second)
        clock.now += 0.1
        _said(bar, 400 << 20, 4_000_000, 1)
    clock.now += 0.1
    _said(bar, 400 << 20, 4_000_000, 3)
    clock.now += 0.1
    _said(bar, 400 << 20, 4_000_000, 4)  # all done: the full bar
    bar.close()
    drawn = [line.rstrip() for line in terminal.output().split("\r")[1:-2]]
    assert drawn == [
        "gputui analyze: reading [##################......]  75%  300MiB of 400MiB  3.0 M events"
        "  0/4 ranks",
        "gputui analyze: summarizing  400MiB read  4.0 M events  1/4 ranks",
        "gputui analyze: summarizing  400MiB read  4.0 M events  3/4 ranks",
        "gputui analyze: reading [########################] 100%  400MiB of 400MiB  4.0 M events"
        "  4/4 ranks",
    ]


def test_a_summary_before_the_threshold_draws_nothing(terminal: Terminal) -> None:
    clock = Clock()
    bar = LoadProgress(1000, 1, terminal.writer, after_s=1.0, clock=clock)
    clock.now += 0.5
    bar.update(1000, 10)
    bar.summarizing(1000, 10)
    bar.close()
    assert terminal.output() == ""


@pytest.mark.parametrize("kind", ["stringio", "pipe", "file"])
def test_nothing_is_drawn_when_stderr_is_not_a_terminal(kind: str, tmp_path: Path) -> None:
    clock = Clock()
    if kind == "stringio":
        stream = io.StringIO()
    elif kind == "pipe":
        r, w = os.pipe()
        os.close(r)
        stream = os.fdopen(w, "w")
    else:
        stream = (tmp_path / "err.txt").open("w")
    with stream:
        bar = LoadProgress(1000, 2, stream, after_s=0.0, clock=clock)
        clock.now += 5
        bar.update(500, 10, 1)
        bar.close()
        assert not bar.enabled
        if kind == "stringio":
            assert stream.getvalue() == ""
    if kind == "file":
        assert (tmp_path / "err.txt").read_text() == ""


def test_the_command_draws_on_a_terminal(
    terminal: Terminal, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(analyze_progress, "SHOW_AFTER_S", 0.0)
    monkeypatch.setattr("sys.stderr", terminal.writer)
    trace = DATA / "traces" / "healthy.pt.trace.json.gz"
    assert main(["analyze", str(trace), "--json"]) == 0
    out = terminal.output()
    assert "gputui analyze: reading [" in out and "events" in out
    # the whole file read, then the summary said, before the line is erased
    assert out.index("100%") < out.index("gputui analyze: summarizing ")
    assert out.endswith("\r") and "\n" not in out
    assert capsys.readouterr().out.startswith("{")


def test_the_command_draws_the_ranks_of_a_directory(
    terminal: Terminal, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # multiprocessing's resource tracker keeps the stderr it starts with open for
    # as long as this process lives: started first, it keeps the real one
    resource_tracker.ensure_running()
    monkeypatch.setattr(analyze_progress, "SHOW_AFTER_S", 0.0)
    monkeypatch.setattr("sys.stderr", terminal.writer)
    assert main(["analyze", str(DATA / "h100x2-nccl"), "--json", "--jobs", "2"]) == 0
    out = terminal.output()
    assert "/14 ranks" in out
    capsys.readouterr()


def test_the_command_draws_nothing_on_a_pipe(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(analyze_progress, "SHOW_AFTER_S", 0.0)
    trace = DATA / "traces" / "healthy.pt.trace.json.gz"
    assert main(["analyze", str(trace), "--json"]) == 0
    assert capsys.readouterr().err == ""
