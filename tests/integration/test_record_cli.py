"""``gputui record``: live, and re-recording a recording (--replay FILE, --demo)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputui.cli import main
from gputui.recording.replay import RecordingWriter, read_demo, read_recording
from tests.unit.test_replay import make_snapshot

T0 = 1_700_000_000.0
#: a recording's cadence jitters by a few milliseconds
JITTER = (0.0, 0.003, -0.002, 0.001, -0.001)


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each message on one line, whatever the temporary path (their width is
    test_report_widths')."""
    monkeypatch.setenv("COLUMNS", "400")


def recording(path: Path, seconds: int = 10) -> Path:
    writer = RecordingWriter(path, interval_s=1.0, note="the source", hostname="node7")
    for k in range(seconds):
        writer.write(make_snapshot(T0 + k + JITTER[k % len(JITTER)], util=float(k)))
    writer.close()
    return path


def utils(path: Path) -> list[float | None]:
    return [s.devices[0].util_gpu_pct for s in read_recording(path)[1]]


def test_help_says_what_record_does(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["record", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "With --replay FILE (or --demo) it re-records that recording" in out
    assert "--replay FILE" in out and "--demo" in out and "--start S" in out


def test_record_re_records_a_whole_recording(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "copy.jsonl.gz"
    assert main(["record", "-o", str(out), "--replay", str(recording(tmp_path / "in.gz"))]) == 0
    assert utils(out) == [float(k) for k in range(10)]
    header, snapshots = read_recording(out)
    assert header.hostname == "node7" and header.note == "the source" and header.interval_s == 1
    assert snapshots == read_recording(tmp_path / "in.gz")[1]
    assert capsys.readouterr().err.endswith("recorded 10 snapshots to " + str(out) + "\n")


def test_record_re_records_a_slice_of_a_recording(tmp_path: Path) -> None:
    source = str(recording(tmp_path / "in.gz"))
    out = tmp_path / "slice.jsonl.gz"
    args = ["record", "-o", str(out), "--replay", source, "--quiet"]
    assert main([*args, "--start", "3", "--duration", "4"]) == 0
    assert utils(out) == [3.0, 4.0, 5.0, 6.0]
    assert main([*args, "--start", "1", "--interval", "3", "--note", "mine"]) == 0
    assert utils(out) == [1.0, 4.0, 7.0]
    header = read_recording(out)[0]
    assert header.interval_s == 3 and header.note == "mine" and header.hostname == "node7"


def test_record_re_records_the_demo_without_a_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo.jsonl.gz"
    assert main(["record", "-o", str(out), "--demo", "--duration", "5"]) == 0
    assert read_recording(out)[1] == read_demo()[1][:5]
    assert "recorded 5 snapshots" in capsys.readouterr().err
    assert main(["--replay", str(out), "--once"]) == 0
    assert "REPLAY" in capsys.readouterr().out


def test_one_snapshot_is_one_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "one.jsonl.gz"
    source = str(recording(tmp_path / "in.gz"))
    assert main(["record", "-o", str(out), "--replay", source, "--duration", "1"]) == 0
    assert capsys.readouterr().err.endswith(f"recorded 1 snapshot to {out}\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--start", "3"], "gputui record: --start skips into a recording: add --replay FILE"),
        (
            ["--replay", "{in}", "--start", "60"],
            "holds no snapshots from 60 s on (its last is at 9 s)",
        ),
        (["--replay", "{out}"], "-o would overwrite the recording it reads"),
        (["--replay", "/nonexistent.gz"], "gputui record: recording not found: /nonexistent.gz"),
        (["--replay", "{in}", "--demo"], "not allowed with argument"),
        (["--demo", "--start", "-1"], "must be between 0 and"),
    ],
)
def test_bad_re_recordings_are_one_line(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = str(recording(tmp_path / "in.gz"))
    out = tmp_path / "out.jsonl.gz"
    overwrite = "{out}" in args
    if overwrite:
        recording(out)
    args = [a.replace("{in}", source).replace("{out}", str(out)) for a in args]
    assert main(["record", "-o", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    # nothing written: no empty file left behind, the recording read left whole
    assert utils(out) == list(map(float, range(10))) if overwrite else not out.exists()


def test_a_damaged_line_is_left_out_and_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import gzip

    good = recording(tmp_path / "in.gz", seconds=3)
    lines = gzip.decompress(good.read_bytes()).splitlines(keepends=True)
    damaged = tmp_path / "damaged.gz"
    damaged.write_bytes(
        gzip.compress(b"".join([*lines[:2], b'{"not": "a snapshot"}\n', *lines[2:]]))
    )
    out = tmp_path / "out.gz"
    assert main(["record", "-o", str(out), "--replay", str(damaged), "--quiet"]) == 0
    assert utils(out) == [0.0, 1.0, 2.0]
    assert capsys.readouterr().err == "gputui record: left out 1 damaged line of the recording\n"


def test_the_saved_session_says_one_message(capsys: pytest.CaptureFixture[str]) -> None:
    from types import SimpleNamespace

    from gputui.commands.tty import run_screen

    app = SimpleNamespace(run=lambda: None, return_code=0)
    for count, said in ((1, "saved 1 message to s.gz"), (2, "saved 2 messages to s.gz")):
        feed = SimpleNamespace(close=lambda: None, recorder=SimpleNamespace(count=count))
        assert run_screen(app, feed, "s.gz") == 0
        assert capsys.readouterr().err == said + "\n"
