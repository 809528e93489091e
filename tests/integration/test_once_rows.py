"""``gputui --once`` with many processes: rows that fit a terminal, ``--rows N``,
``--all``, every row into a pipe, the line that counts the rest, and ``--json``
streamed with the same content as the whole document."""

from __future__ import annotations

import dataclasses
import io
import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gputui import fmt
from gputui.recording.replay import RecordingWriter
from gputui.reports import monitor as report
from gputui.snapshot.codec import print_document, snapshot_document
from gputui.snapshot.model import ProcessSnapshot, Snapshot
from tests.integration.test_cli import run_cli
from tests.unit.test_replay import make_snapshot

MIB = 2**20
COUNT = 40
#: what the report asks of its source
_SOURCE: Any = SimpleNamespace(is_recording=True, label="test")


def _many(count: int = COUNT) -> Snapshot:
    base = make_snapshot(1_700_000_000.0)
    procs = tuple(
        ProcessSnapshot(
            pid=1000 + k,
            gpu_index=0,
            gpu_uuid="GPU-0000",
            type="compute",
            gpu_mem_bytes=(k + 1) * MIB,
            user=f"user{k % 3}",
            cmdline=("python", "serve.py", f"--shard={k}"),
            start_time_s=1_699_999_000.0,
        )
        for k in range(count)
    )
    return dataclasses.replace(base, processes=procs)


def _rows(lines: list[str]) -> list[str]:
    return [line for line in lines if "serve.py --shard=" in line]


def test_rows_limit_shows_the_biggest_and_counts_the_rest() -> None:
    snap = _many()
    source = _SOURCE
    lines = report.render(snap, source, None, width=100, rows=5)
    shown = _rows(lines)
    assert len(shown) == 5
    # the five using the most GPU memory: shards 35..39
    assert sorted(int(r.rsplit("=", 1)[1]) for r in shown) == [35, 36, 37, 38, 39]
    rest = sum((k + 1) * MIB for k in range(COUNT - 5))
    assert f"and 35 more processes (their GPU memory: {fmt.size(rest)})" in "\n".join(lines)


def test_height_fits_the_report_in_the_terminal() -> None:
    snap = _many()
    source = _SOURCE
    whole = report.render(snap, source, None, width=100)
    assert len(_rows(whole)) == COUNT
    fitted = report.render(snap, source, None, width=100, height=30)
    assert len(fitted) < 30 and len(_rows(fitted)) >= report.MIN_FIT_ROWS
    assert "more processes" in "\n".join(fitted)
    tiny = report.render(snap, source, None, width=100, height=3)
    assert len(_rows(tiny)) == report.MIN_FIT_ROWS


def test_print_snapshot_fits_a_terminal_and_takes_every_row_into_a_pipe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    snap = _many()
    source = _SOURCE
    printed: list[list[str]] = []
    monkeypatch.setattr(report, "emit", lambda lines, _ascii: printed.append(list(lines)))
    monkeypatch.setattr(report, "output_height", lambda: 30)  # a terminal of 30 lines
    report.print_snapshot(snap, source, None)
    report.print_snapshot(snap, source, None, every_row=True)
    report.print_snapshot(snap, source, None, rows=7)
    monkeypatch.setattr(report, "output_height", lambda: None)  # a pipe
    report.print_snapshot(snap, source, None)
    fitted, every, seven, piped = (len(_rows(lines)) for lines in printed)
    assert fitted < COUNT and every == COUNT and seven == 7 and piped == COUNT


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    path = tmp_path / "many.jsonl.gz"
    writer = RecordingWriter(path, interval_s=1.0)
    writer.write(_many())
    writer.close()
    return path


def test_cli_pipe_prints_every_row_and_rows_limits(recording: Path) -> None:
    piped = run_cli("--replay", str(recording), "--once")
    assert piped.returncode == 0, piped.stderr
    assert len(_rows(piped.stdout.splitlines())) == COUNT
    limited = run_cli("--replay", str(recording), "--once", "--rows", "3")
    assert limited.returncode == 0, limited.stderr
    assert len(_rows(limited.stdout.splitlines())) == 3
    assert "and 37 more processes" in limited.stdout
    every = run_cli("--replay", str(recording), "--once", "--all")
    assert len(_rows(every.stdout.splitlines())) == COUNT


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--once", "--rows", "0"], "--rows: must be between 1 and"),
        (["--once", "--rows", "many"], "--rows: not a number of rows"),
        (["--rows", "3"], "--rows and --all need --once"),
        (["--once", "--all", "--rows", "3"], "not allowed with argument"),
        (["--once", "--json", "--rows", "3"], "--json holds every process"),
    ],
    ids=["zero", "word", "no_once", "both", "json"],
)
def test_bad_rows_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    proc = run_cli("--demo", *args)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert proc.stdout == ""


def test_json_streamed_holds_the_whole_document() -> None:
    snap = _many(600)  # more than one chunk of processes
    out = io.StringIO()
    print_document(snap, "test", True, None, [{"rule": "x"}], out=out)
    whole = snapshot_document(snap, "test", True, None, [{"rule": "x"}])
    assert json.loads(out.getvalue()) == json.loads(json.dumps(whole))
    nan = dataclasses.replace(snap.processes[0], cpu_pct=math.nan)
    out = io.StringIO()
    print_document(dataclasses.replace(snap, processes=(nan,)), "test", True, out=out)
    assert json.loads(out.getvalue())["processes"][0]["cpu_pct"] is None


def test_help_names_the_new_flags() -> None:
    proc = run_cli("--help")
    assert "--rows N" in proc.stdout and "--all" in proc.stdout
