"""Recording lines decoded piece by piece: the same snapshots as a whole decode,
the unchanged processes reused, and every line that does not cut cleanly decoded
whole (with the whole decode's errors)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputui.recording.io import load_line
from gputui.recording.snapshot_lines import SnapshotLines
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


# -- the run of user, name and command line --------------------------------------


def _decoded_pieces_and_whole(second: bytes) -> tuple[Any, Any]:
    """``second`` decoded after an ordinary line (every process's run known), and
    decoded whole: (result or error text) of each."""
    decoder = SnapshotLines()
    decoder.decode(_line(snapshot_to_json(_with_processes(1.0, [_proc(1), _proc(2)]))))
    results = []
    for decode in (decoder.decode, lambda line: snapshot_from_json(load_line(line))):
        try:
            results.append(decode(second))
        except (DecodeError, ValueError) as exc:
            results.append(str(exc))
    return results[0], results[1]


def test_a_changed_process_with_the_same_run_keeps_its_words_and_reads_the_rest() -> None:
    decoder = SnapshotLines()
    procs = [
        _proc(pid, user="ana", name="python", cmdline=("serve", str(pid))) for pid in (1, 2, 3)
    ]
    # The first line is read whole; on the next, every process changed and its
    # run is read on its own: from there on a run can be taken over.
    decoder.decode(_line(snapshot_to_json(_with_processes(0.0, procs))))
    procs = [dataclasses.replace(p, cpu_pct=2.0) for p in procs]
    a = decoder.decode(_line(snapshot_to_json(_with_processes(1.0, procs))))
    changed = [
        dataclasses.replace(procs[0], cpu_pct=77.0, gpu_mem_bytes=5),  # numbers only
        dataclasses.replace(procs[1], cmdline=("serve", "other")),  # its words too
        procs[2],
    ]
    b = decoder.decode(_line(snapshot_to_json(_with_processes(2.0, changed))))
    assert b == _with_processes(2.0, changed)
    assert b.processes[0] is not a.processes[0]
    assert b.processes[0].cmdline is a.processes[0].cmdline  # taken, not read again
    assert b.processes[0].cpu_pct == 77.0 and b.processes[0].gpu_mem_bytes == 5
    assert b.processes[1].cmdline == ("serve", "other")
    assert b.processes[2] is a.processes[2]
    # a process that came to a place whose run differs reads its own
    third = [changed[0], _proc(9, user="bo", name="x", cmdline=("y",)), changed[2]]
    c = decoder.decode(_line(snapshot_to_json(_with_processes(3.0, third))))
    assert c == _with_processes(3.0, third)


def _hostile_run(case: str) -> bytes:
    line = _line(snapshot_to_json(_with_processes(2.0, [_proc(1, cpu_pct=5.0), _proc(2)])))
    run = b'"user":"ana","name":null,"cmdline":'
    assert line.count(run) == 2
    if case == "user_again_after_the_run":
        return line.replace(b'"hooked":false}', b'"hooked":false,"user":"eve"}', 1)
    if case == "name_again_before_the_run":
        return line.replace(b'"type":"compute",', b'"type":"compute","name":"eve",', 1)
    if case == "bracket_before_the_run":
        return line.replace(b'"type":"compute",', b'"type":"compute","x":{"y":1},', 1)
    if case == "another_key_in_the_run":  # the rest's later "rss_bytes" wins
        return line.replace(run, b'"user":"ana","rss_bytes":5,"name":null,"cmdline":', 1)
    if case == "run_ends_inside_a_value":
        return line.replace(run, b'"user":"ana","x":{"z":1,"cpu_pct":2},"name":null,"cmdline":', 1)
    if case == "run_not_an_object":
        return line.replace(run, b'"user":"ana","name":null,"cmdline":[1,],"x":', 1)
    if case == "user_inside_a_nested_value_first":
        return line.replace(b'"type":"compute",', b'"type":"compute","x":[{"user":"a"}],', 1)
    if case == "run_inside_a_nested_value":  # and none at the top level
        doc = snapshot_to_json(_with_processes(2.0, [_proc(1, cpu_pct=5.0), _proc(2)]))
        first = doc["processes"][0]
        for key in ("user", "name", "cmdline"):
            del first[key]
        items = list(first.items())
        items.insert(4, ("x", {"k": 1, "user": "a", "cpu_pct": 2}))
        doc["processes"][0] = dict(items)
        return _line(doc)
    raise AssertionError(case)


@pytest.mark.parametrize(
    "case",
    [
        "user_again_after_the_run",
        "name_again_before_the_run",
        "bracket_before_the_run",
        "another_key_in_the_run",
        "run_ends_inside_a_value",
        "run_not_an_object",
        "user_inside_a_nested_value_first",
        "run_inside_a_nested_value",
    ],
)
def test_runs_that_do_not_stand_alone_are_read_with_the_whole_process(case: str) -> None:
    line = _hostile_run(case)
    after, whole = _decoded_pieces_and_whole(line)
    assert after == whole
    fresh, whole = _decoded_fresh_and_whole(line)
    assert fresh == whole


def _decoded_fresh_and_whole(line: bytes) -> tuple[Any, Any]:
    out = []
    for decode in (SnapshotLines().decode, lambda x: snapshot_from_json(load_line(x))):
        try:
            out.append(decode(line))
        except (DecodeError, ValueError) as exc:
            out.append(str(exc))
    return out[0], out[1]


_KEYS = st.sampled_from(["user", "name", "cmdline", "cpu_pct", "pid", "x", "hooked"])
_VALUES = st.one_of(
    st.none(),
    st.text(max_size=4),
    st.integers(-2, 3),
    st.lists(st.text(max_size=3), max_size=2),
    st.dictionaries(_KEYS, st.integers(0, 2), max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(
    extra=st.lists(st.tuples(_KEYS, _VALUES), max_size=4),
    at=st.integers(0, 30),
    words=st.sampled_from([("a", "b"), ("a", "c")]),
)
def test_any_process_text_decodes_after_a_line_as_it_decodes_whole(
    extra: list[tuple[str, Any]], at: int, words: tuple[str, ...]
) -> None:
    # The second process of a line gets keys and values spliced in anywhere,
    # duplicates and nested values included: read after a line whose runs are
    # known, it is what the whole line reads as (or fails as the whole fails).
    doc = snapshot_to_json(_with_processes(2.0, [_proc(1), _proc(2, cmdline=words)]))
    items = list(doc["processes"][1].items())
    at = min(at, len(items))
    spliced = ",".join(
        json.dumps(k) + ":" + json.dumps(v, separators=(",", ":"))
        for k, v in [*items[:at], *extra, *items[at:]]
    )
    text = _line({**doc, "processes": ["P0", "P1"]})
    line = text.replace(b'"P0"', _line(doc["processes"][0])).replace(
        b'"P1"', b"{" + spliced.encode() + b"}"
    )
    after, whole = _decoded_pieces_and_whole(line)
    assert after == whole


# -- compact lines: {"pid": PID} for the process at its place on the line before --


def _compact(doc: dict[str, Any], places: set[int]) -> bytes:
    out = dict(doc)
    out["processes"] = [
        {"pid": p["pid"]} if i in places else p for i, p in enumerate(doc["processes"])
    ]
    return _line(out)


def test_a_pid_alone_is_the_process_at_its_place_on_the_line_before() -> None:
    decoder = SnapshotLines()
    procs = [_proc(pid, cmdline=("serve", str(pid))) for pid in range(10, 20)]
    a = decoder.decode(_line(snapshot_to_json(_with_processes(1.0, procs))))
    changed = [dataclasses.replace(p, cpu_pct=9.0) if p.pid == 13 else p for p in procs]
    second = snapshot_to_json(_with_processes(2.0, changed))
    b = decoder.decode(_compact(second, {i for i in range(10) if i != 3}))
    assert b == _with_processes(2.0, changed)
    assert [x is y for x, y in zip(a.processes, b.processes, strict=True)] == [
        i != 3 for i in range(10)
    ]
    # the same places again, and a process written whole that was written so
    c = decoder.decode(_compact(snapshot_to_json(_with_processes(3.0, changed)), {0, 1, 3}))
    assert c == _with_processes(3.0, changed)
    assert all(x is y for x, y in zip(b.processes, c.processes, strict=True))
    # fewer processes: a pid alone still names the place on the line before
    d = decoder.decode(_compact(snapshot_to_json(_with_processes(4.0, changed[:4])), {2}))
    assert d == _with_processes(4.0, changed[:4]) and d.processes[2] is c.processes[2]


@pytest.mark.parametrize("case", ["another_pid", "no_such_place", "after_a_bad_line"])
def test_a_pid_alone_without_its_process_is_an_error_that_says_so(case: str) -> None:
    decoder = SnapshotLines()
    procs = [_proc(pid) for pid in (1, 2)]
    doc = snapshot_to_json(_with_processes(1.0, procs))
    decoder.decode(_line(doc))
    if case == "after_a_bad_line":
        with pytest.raises(ValueError):
            decoder.decode(b'{"timestamp_s":')
        line = _compact(doc, {1})
    elif case == "another_pid":
        line = _compact(doc, {1}).replace(b'{"pid":2}', b'{"pid":7}')
    else:
        bigger = snapshot_to_json(_with_processes(1.0, [*procs, _proc(3)]))
        line = _compact(bigger, {2})
    with pytest.raises(DecodeError, match="no such process"):
        decoder.decode(line)
    # and the decoder reads the next whole line
    assert decoder.decode(_line(doc)) == _with_processes(1.0, procs)


def test_a_first_line_with_a_pid_alone_fails_as_the_whole_decode_fails() -> None:
    line = _compact(snapshot_to_json(_with_processes(1.0, [_proc(1), _proc(2)])), {1})
    with pytest.raises(DecodeError) as whole:
        snapshot_from_json(load_line(line))
    with pytest.raises(DecodeError) as pieces:
        SnapshotLines().decode(line)
    assert str(pieces.value) == str(whole.value)
