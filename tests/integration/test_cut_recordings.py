"""A recording that ends early (a recorder killed mid-write, a copy cut short)
keeps playing what it holds, and every command that plays it says on stderr
that it ends early and after which snapshot (or message)."""

from __future__ import annotations

import argparse
import zlib
from pathlib import Path

import pytest

from gputui.cli import main
from gputui.recording.attach import read_attach_recording
from gputui.recording.io import embedded_bytes
from gputui.recording.replay import ReplaySource, read_recording
from tests.integration.test_record_cli import recording

ATTACH = Path(__file__).resolve().parents[1] / "samples" / "attach-v1.jsonl.gz"


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each message on one line, whatever the temporary path (their width is
    test_report_widths')."""
    monkeypatch.setenv("COLUMNS", "400")


def cut(data: bytes, path: Path, keep: float = 0.5) -> Path:
    """The first ``keep`` of ``data``'s compressed bytes, as ``path``."""
    path.write_bytes(data[: int(len(data) * keep)])
    return path


def whole_lines(path: Path) -> int:
    """The lines a cut gzip file holds whole (each with its newline)."""
    data = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(path.read_bytes())
    return data.count(b"\n")


def test_a_cut_recording_re_records_what_it_holds_and_says_where_it_ends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = cut(embedded_bytes("demo.jsonl.gz"), tmp_path / "cut.jsonl.gz", 0.3)
    held = whole_lines(source) - 1  # the header
    out = tmp_path / "out.jsonl.gz"
    assert main(["record", "-o", str(out), "--replay", str(source)]) == 0
    assert len(read_recording(out)[1]) == held
    err = capsys.readouterr().err
    assert f"ends early, after snapshot {held} (cut off, or still being written)" in err
    assert err.startswith(f"recorded {held} snapshots to ")
    # stderr is not a terminal here: no progress redrawn with carriage returns
    assert "\r" not in err


def test_a_whole_recording_says_nothing_of_its_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.jsonl.gz"
    assert main(["record", "-o", str(out), "--replay", str(recording(tmp_path / "in.gz"))]) == 0
    assert capsys.readouterr().err == f"recorded 10 snapshots to {out}\n"


def test_the_replay_says_where_a_cut_recording_ends(tmp_path: Path) -> None:
    source = cut(embedded_bytes("demo.jsonl.gz"), tmp_path / "cut.jsonl.gz", 0.3)
    held = whole_lines(source) - 1
    replay = ReplaySource.from_file(source)
    try:
        # the count finds it first; the pass that reaches the end says the same
        assert replay.count() == held
        assert replay.ends_early == held
        seen = 0
        while replay.sample() is not None and not replay.loops:
            seen += 1
        assert seen == held and replay.progress().ends_early == held
        note = replay.ends_early_note()
        assert (
            note == f"{source} ends early, after snapshot {held} (cut off, or still being written)"
        )
    finally:
        replay.close()
    whole = ReplaySource.from_file(recording(tmp_path / "in.gz"))
    try:
        assert whole.count() == 10 and whole.ends_early is None
        assert whole.ends_early_note() is None
    finally:
        whole.close()


def test_the_monitor_says_on_stderr_after_its_screen_where_a_recording_ends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gputui.commands.monitor import _say_ends_early

    source = cut(embedded_bytes("demo.jsonl.gz"), tmp_path / "cut.jsonl.gz", 0.3)
    held = whole_lines(source) - 1
    replay = ReplaySource.from_file(source)
    try:
        replay.count()
        _say_ends_early(replay, argparse.Namespace(demo=None, replay=str(source)))
    finally:
        replay.close()
    assert capsys.readouterr().err == (
        f"gputui: {source} ends early, after snapshot {held} (cut off, or still being written)\n"
    )


async def test_the_monitor_screen_says_where_a_recording_ends(tmp_path: Path) -> None:
    from gputui.tui.app import make_app

    source = cut(embedded_bytes("demo.jsonl.gz"), tmp_path / "cut.jsonl.gz", 0.3)
    held = whole_lines(source) - 1
    app = make_app(ReplaySource.from_file(source), autostart=False)
    async with app.run_test(size=(100, 30)) as pilot:
        app.advance(held + 1)  # the whole pass, and the first snapshot again
        await pilot.pause()
        said = [n.message for n in app._notifications]
        assert (
            f"the recording ends early, after snapshot {held} (cut off, or still being written)"
            in said
        )
        app.advance(held + 1)  # once only
        await pilot.pause()
        assert len([n for n in app._notifications if "ends early" in n.message]) == 1


def test_attach_once_of_a_cut_recording_says_where_it_ends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = cut(ATTACH.read_bytes(), tmp_path / "cut.jsonl.gz", 0.5)
    held = whole_lines(source) - 2  # the header and the hello
    assert len(read_attach_recording(source).messages) == held
    assert main(["attach", "--replay", str(source), "--once"]) == 0
    captured = capsys.readouterr()
    assert "steps" in captured.out  # the report of what it holds
    assert captured.err == (
        f"gputui attach: {source} ends early, after message {held} "
        "(cut off, or still being written)\n"
    )
    assert main(["attach", "--replay", str(ATTACH), "--once"]) == 0
    assert capsys.readouterr().err == ""
