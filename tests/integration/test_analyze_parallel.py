"""``gputui analyze`` reading rank files in worker processes: the same report as
one after the other, the same one line for a bad file, summaries (not events)
back from the workers, and one file read in this process."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest

from gputui.cli import main
from gputui.commands import analyze_load
from tests.helpers.tracegen import reference_trace

DATA = Path(__file__).resolve().parents[1] / "data"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["analyze", *args])
    out, err = capsys.readouterr()
    return code, out, err


def serial_and_parallel(capsys: pytest.CaptureFixture[str], *args: str) -> None:
    one = run(capsys, *args, "--jobs", "1")
    several = run(capsys, *args, "--jobs", "3")
    assert one == several
    assert one[0] == 0


@pytest.mark.parametrize("fmt", ["--json", "--top=5"])
def test_the_ranks_of_a_job_read_in_workers_report_the_same(
    capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    serial_and_parallel(capsys, str(DATA / "h100x2-nccl"), fmt)


def test_files_without_ranks_are_numbered_in_the_order_given(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Ranks from the files' order, and a copy (the same trace_id) read once."""
    names = ["launch_bound", "host_sync", "elementwise"]
    files = [str(DATA / "traces" / f"{n}.pt.trace.json.gz") for n in names]
    copy = tmp_path / "copy.pt.trace.json.gz"
    shutil.copy(files[1], copy)
    serial_and_parallel(capsys, files[2], files[0], str(copy), files[1], "--json")
    code, _out, err = run(capsys, files[2], files[0], str(copy), files[1], "--json")
    # the warnings wrap to the output's width, where the paths' lengths put the breaks
    assert code == 0 and "a copy of" in " ".join(err.split())


def test_a_bad_file_in_a_worker_is_the_same_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    good = reference_trace()
    good.write(tmp_path / "a.pt.trace.json")
    good.write(tmp_path / "c.pt.trace.json")
    (tmp_path / "b.pt.trace.json").write_text('{"traceEvents": [{"ph": "X"')
    (tmp_path / "d.pt.trace.json").write_text("not json")
    one = run(capsys, str(tmp_path), "--jobs", "1")
    several = run(capsys, str(tmp_path), "--jobs", "4")
    assert one == several
    code, out, err = several
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "b.pt.trace.json: truncated" in err


def test_workers_are_bounded_by_the_cpus_and_the_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(analyze_load, "cpus", lambda: 16)
    assert analyze_load.workers_for(3) == 3
    assert analyze_load.workers_for(40) == 16
    assert analyze_load.workers_for(40, jobs=4) == 4
    assert analyze_load.workers_for(2, jobs=8) == 2
    assert analyze_load.workers_for(1) == 1
    monkeypatch.setattr(analyze_load, "cpus", lambda: 1)
    assert analyze_load.workers_for(8) == 1


def test_one_file_is_read_in_this_process(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_workers(*args: object) -> None:
        raise AssertionError("one file started worker processes")

    monkeypatch.setattr(analyze_load, "_parallel", no_workers)
    code, out, _err = run(capsys, str(DATA / "traces" / "healthy.pt.trace.json.gz"), "--json")
    assert code == 0 and out.startswith("{")


def test_a_worker_hands_back_the_summary_not_the_events() -> None:
    path = DATA / "traces" / "healthy.pt.trace.json.gz"
    read = analyze_load.read_rank(0, str(path), False, 30)
    sent = len(pickle.dumps(read))
    assert read.summary.events > 25_000
    assert sent < 100_000  # the events alone pickle to megabytes
    assert read.origin.path == str(path)
