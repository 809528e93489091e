"""Recording lines decoded piece by piece: the same snapshots as a whole decode,
the unchanged processes reused, and every line that does not cut cleanly decoded
whole (with the whole decode's errors)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from gputui.collectors.recording_io import load_line
from gputui.collectors.snapshot_lines import SnapshotLines
from gputui.snapshot.codec import DecodeError, snapshot_from_json, snapshot_to_json
from gputui.snapshot.model import ProcessSnapshot, Snapshot
from tests.unit.test_replay import make_snapshot


def _line(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _with_processes(t: float, procs: list[ProcessSnapshot]) -> Snapshot:
    return dataclasses.replace(make_snapshot(t), processes=tuple(procs))


def _proc(pid: int, **changes: Any) -> ProcessSnapshot:
    base = ProcessSnapshot(
        pid=pid,
        gpu_index=0,
        gpu_uuid="GPU-0000",
        type="compute",
        gpu_mem_bytes=2**30,
        user="ana",
        cmdline=("python", "serve.py", f"--shard={pid}", "naïve ✓"),
        cpu_pct=1.0,
        start_time_s=100.0,
    )
    return dataclasses.replace(base, **changes)


def test_pieces_decode_as_the_whole_line_and_unchanged_processes_are_reused() -> None:
    decoder = SnapshotLines()
    first = _with_processes(1.0, [_proc(pid) for pid in range(10, 20)])
    second = _with_processes(
        2.0, [_proc(pid, cpu_pct=50.0) if pid == 15 else _proc(pid) for pid in range(10, 21)]
    )
    a = decoder.decode(_line(snapshot_to_json(first)))
    b = decoder.decode(_line(snapshot_to_json(second)))
    assert a == first and b == second
    for before, after in zip(a.processes, b.processes, strict=False):
        assert (after is before) == (after.pid != 15)
    assert b.processes[-1].pid == 20


def test_processes_that_moved_are_reused_and_those_in_place_compared_in_place() -> None:
    decoder = SnapshotLines()
    procs = [_proc(pid) for pid in range(10, 30)]
    a = decoder.decode(_line(snapshot_to_json(_with_processes(1.0, procs))))
    # the first process went, a new one came last: every other one moved up
    moved = [*procs[1:], _proc(99)]
    b = decoder.decode(_line(snapshot_to_json(_with_processes(2.0, moved))))
    assert b == _with_processes(2.0, moved)
    assert all(
        after is before for after, before in zip(b.processes[:-1], a.processes[1:], strict=True)
    )
    # in place: two changed, two swapped (decoded anew, the same values)
    swapped = list(b.processes)
    swapped[3], swapped[4] = swapped[4], swapped[3]
    swapped[0] = _proc(swapped[0].pid, cpu_pct=7.0)
    c = decoder.decode(_line(snapshot_to_json(_with_processes(3.0, swapped))))
    assert c == _with_processes(3.0, swapped)
    kept = [i for i in range(len(swapped)) if c.processes[i] is b.processes[i]]
    assert kept == [i for i in range(len(swapped)) if i not in (0, 3, 4)]


@pytest.mark.parametrize("count", [0, 1, 2])
def test_few_processes(count: int) -> None:
    snap = _with_processes(1.0, [_proc(pid) for pid in range(count)])
    assert SnapshotLines().decode(_line(snapshot_to_json(snap))) == snap


def _hostile(case: str) -> bytes:
    doc = snapshot_to_json(_with_processes(1.0, [_proc(1), _proc(2)]))
    if case == "separator_in_a_string":
        doc["processes"][0]["cmdline"] = ['x"},{"pid":9,"gpu_index":0}']
    elif case == "nested_processes_key":
        doc["host"]["extra"] = {"processes": [{"pid": 5}, {"pid": 6}]}
    elif case == "objects_nested_in_a_process":
        doc["processes"][0]["extra"] = [{"pid": 7}, {"pid": 8}, {"pid": 9}]
    elif case == "key_order":
        doc["processes"][1] = dict(reversed(list(doc["processes"][1].items())))
    elif case == "separator_before_the_processes":
        doc = {"extra": [{"pid": 3}, {"pid": 4}], **doc}
    line = _line(doc)
    if case == "spaces":
        line = json.dumps(doc).encode()
    return line


@pytest.mark.parametrize(
    "case",
    [
        "separator_in_a_string",
        "nested_processes_key",
        "objects_nested_in_a_process",
        "key_order",
        "spaces",
        "separator_before_the_processes",
    ],
)
def test_lines_that_do_not_cut_cleanly_decode_as_a_whole(case: str) -> None:
    line = _hostile(case)
    whole = snapshot_from_json(load_line(line))
    decoder = SnapshotLines()
    decoder.decode(_line(snapshot_to_json(_with_processes(0.0, [_proc(1), _proc(2)]))))
    assert decoder.decode(line) == whole
    assert SnapshotLines().decode(line) == whole


@pytest.mark.parametrize(
    "bad",
    [
        b'{"timestamp_s":1,"processes":[{"pid":1,"gpu_index":0}]}',
        b'{"timestamp_s":1,"processes":[{"pid":1},{"pid":"x"}]}',
        b'{"timestamp_s":1,"processes":[{"pid":1,',
        b'{"timestamp_s":1,"processes":[{"pid":1,"gpu_index":0,"gpu_uuid":"u","type":"c"}]} x',
    ],
    ids=["missing_fields", "bad_pid", "cut_off", "extra_data"],
)
def test_bad_lines_fail_as_the_whole_decode_fails(bad: bytes) -> None:
    with pytest.raises((DecodeError, ValueError)) as whole:
        snapshot_from_json(load_line(bad))
    with pytest.raises((DecodeError, ValueError)) as pieces:
        SnapshotLines().decode(bad)
    assert str(pieces.value) == str(whole.value)


@pytest.mark.parametrize("words", [("serve.py", "--port=1"), ("naïve ✓",)], ids=["ascii", "utf8"])
def test_ascii_and_other_lines_decode_alike(words: tuple[str, ...]) -> None:
    # An ASCII line's new processes are read in one pass; another line's one by one.
    decoder = SnapshotLines()
    procs = [_proc(pid, cmdline=(*words, str(pid))) for pid in range(5)]
    first = _with_processes(1.0, procs)
    second = _with_processes(2.0, [dataclasses.replace(p, cpu_pct=9.0) for p in procs])
    assert decoder.decode(_line(snapshot_to_json(first))) == first
    assert decoder.decode(_line(snapshot_to_json(second))) == second


@pytest.mark.parametrize(
    ("field", "digits"),
    [
        ("rss_bytes", "1" + "0" * 30),
        ("rss_bytes", "-1" + "0" * 24),
        ("cpu_pct", "1" + "0" * 25),
        ("gpu_mem_bytes", "1" + "0" * 5000),
        ("pid", "1" + "0" * 30),
        ("gpu_index", "1" + "0" * 5000),
    ],
    ids=["nullable", "negative", "float_field", "beyond_python", "required", "required_beyond"],
)
def test_huge_integers_decode_as_the_whole_line_reads_them(field: str, digits: str) -> None:
    procs = [_proc(1, cmdline=("a",)), _proc(2, cmdline=("b",))]  # ASCII: one pass
    doc = snapshot_to_json(_with_processes(1.0, procs))
    doc["processes"][0][field] = "HUGE"
    line = _line(doc).replace(b'"HUGE"', digits.encode())
    try:
        whole: Any = snapshot_from_json(load_line(line))
    except (DecodeError, ValueError) as exc:
        whole = str(exc)
    try:
        pieces: Any = SnapshotLines().decode(line)
    except (DecodeError, ValueError) as exc:
        pieces = str(exc)
    assert pieces == whole
