"""The printed and JSON forms of a memory snapshot result (``attach --memory-snapshot``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputui.cli import main
from gputui.reports import memory as memory_report
from gputui.session.oneshot import memsnap_findings
from tests.helpers import memsnap as h

EVIL = "/home/u/\x1b[2J\x1b]0;pwned\x07evil[bold]x[/bold].py"


def hostile_leak() -> h.MemorySnapshotResult:
    snap = h.Snapshot()
    snap.marker()
    for _ in range(4):
        snap.alloc(2**20, h.user_stack(EVIL, 7, "keep\x1b[31m"))
        snap.marker()
    return h.result(snap.build(), snapshot_path="/tmp/\x1b[1mx.pickle", notes=("n\x1b[0m",))


def test_text_report(capsys: pytest.CaptureFixture[str]) -> None:
    result = h.result(h.planted_leak())
    memory_report.print_result(result, memsnap_findings(result))
    out = " ".join(capsys.readouterr().out.split())  # (the report wraps at 80 columns)
    assert "memory snapshot of job 4242: steps 100..104 (5 steps) on device 0" in out
    assert "cost: 38.2 ms at the last step boundary" in out
    assert "growing allocations (alive at every step boundary" in out
    assert "leaky.py:42 (remember)" in out
    assert "+4.0MiB" in out and "4.0MiB → 20.0MiB" in out
    assert f"at {h.LEAK_FILE}:42 in remember" in out  # the stack of the top leak
    assert "top allocation sites" in out and "model.py:30 (forward)" in out
    assert "largest live blocks" in out and "allocated before the window" in out
    assert "WARN allocations from one site survive" in out and "loss.item()" in out
    assert "file: /home/u/.cache/gputui/memory/" in out and "memory_viz" in out


def test_text_report_without_a_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    result = h.result(h.planted_leak(steps=2))
    memory_report.print_result(result, memsnap_findings(result))
    out = capsys.readouterr().out
    assert "not judged: 3 step boundaries found, 4 needed" in out
    clean = h.result(h.planted_leak(leak=False))
    memory_report.print_result(clean, memsnap_findings(clean))
    assert "none: no allocation site grew across the steps" in capsys.readouterr().out


def test_job_text_is_cleaned_in_print_and_exact_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    result = hostile_leak()
    found = memsnap_findings(result)
    memory_report.print_result(result, found)
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b" in out  # shown as a visible escape
    assert "[bold]" in out  # not taken for markup
    doc = memory_report.json_doc(4242, result, found)
    text = json.dumps(doc)
    back = json.loads(text)
    assert back["memory_snapshot"]["growing"][0]["site"]["file"] == EVIL
    assert back["memory_snapshot"]["snapshot_path"] == "/tmp/\x1b[1mx.pickle"
    assert "type" not in back["memory_snapshot"] and back["pid"] == 4242
    assert [f["rule"] for f in back["findings"]] == ["memory.leak_site"]


def test_replay_once_reports_the_recorded_snapshot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.jsonl.gz"
    h.record_session(path)
    assert main(["attach", "--replay", str(path), "--once", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    top = doc["memory_snapshot"]["growing"][0]["site"]
    assert (top["file"], top["line"]) == (h.LEAK_FILE, h.LEAK_LINE)
    assert main(["attach", "--replay", str(path), "--once"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # (the report wraps at 80 columns)
    assert "memory snapshot steps 100..104: 1 growing allocation site" in out
    assert f"top {h.LEAK_FILE}:{h.LEAK_LINE}" in out
    # a recording without one still replays, with null in its place
    old = tmp_path / "old.jsonl.gz"
    h.record_session(old, with_snapshot=False)
    assert main(["attach", "--replay", str(old), "--once", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memory_snapshot"] is None
