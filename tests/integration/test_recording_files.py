"""Recording files as untrusted input: what is not a file, bombs, hostile values,
bounds, file modes, and the formats users already have on disk."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import re
import signal
import stat
import subprocess
import sys
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputui.recording import writer as writing
from gputui.recording.attach import (
    AttachRecorder,
    read_attach_bytes,
    read_attach_recording,
)
from gputui.recording.io import MAX_LINE_BYTES, LineReader, reader_for_bytes
from gputui.recording.replay import (
    RecordingError,
    RecordingWriter,
    ReplaySource,
    read_demo,
    read_recording,
)
from gputui.snapshot.codec import snapshot_to_json
from gputui.snapshot.model import Snapshot
from tests.helpers.deadlines import RUN_S
from tests.unit.test_replay import make_snapshot

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
ROOT = Path(__file__).resolve().parents[2]
T0 = 1_767_225_600.0
HEADER = {"type": "gputui-recording", "schema": 1, "interval_s": 1.0}


def run_cli(*args: str, timeout: float = RUN_S) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("GPUTUI_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "gputui", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def write_lines(path: Path, lines: list[Any], compress: bool = True) -> Path:
    """A recording of raw lines: dicts are JSON-encoded as Python would (NaN allowed)."""
    text = b"".join(
        (line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n" for line in lines
    )
    path.write_bytes(gzip.compress(text) if compress else text)
    return path


def good(t: float = T0, **changes: Any) -> dict[str, Any]:
    data = snapshot_to_json(make_snapshot(t))
    data.update(changes)
    return data


# -- not a regular file ----------------------------------------------------------------


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_only_regular_files_are_read(kind: str, fifo: Path, tmp_path: Path) -> None:
    path = {"fifo": fifo, "device": Path("/dev/zero"), "directory": tmp_path}[kind]
    word = {"fifo": "FIFO", "device": "device", "directory": "directory"}[kind]
    # A FIFO with no writer would block an ordinary open forever: this returns.
    for read in (read_recording, ReplaySource.from_file, read_attach_recording):
        with pytest.raises(RecordingError, match=word):
            read(path)


def test_cli_refuses_a_fifo_at_once(fifo: Path) -> None:
    proc = run_cli("--replay", str(fifo), "--once")
    assert proc.returncode == 2
    assert "FIFO" in proc.stderr and proc.stderr.count("\n") == 1


# -- bounds ----------------------------------------------------------------------------


def _bomb(path: Path, zeros: int) -> Path:
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = b"\0" * 2**20
    with open(path, "wb") as f:
        f.write(comp.compress(json.dumps(HEADER).encode() + b"\n"))
        for _ in range(zeros // len(chunk)):
            f.write(comp.compress(chunk))
        f.write(comp.flush())
    return path


def test_a_gzip_bomb_is_refused_with_bounded_memory(tmp_path: Path) -> None:
    path = _bomb(tmp_path / "bomb.gz", 4 * MAX_LINE_BYTES)
    assert path.stat().st_size < 200_000
    tracemalloc.start()
    try:
        with pytest.raises(RecordingError, match="longer than"):
            ReplaySource.from_file(path)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # one line at most, plus a decompressed chunk: never the whole bomb
    assert peak < 2 * MAX_LINE_BYTES + 2**20


def test_empty_lines_are_bounded(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "r.gz", [HEADER, good(), *([b""] * 10_000), good(T0 + 1)])
    with pytest.raises(RecordingError, match="empty lines"):
        read_recording(path)
    # a few, as a hand-edited file may have, are skipped
    path = write_lines(tmp_path / "r.gz", [HEADER, good(), b"", b"  ", good(T0 + 1), b""])
    assert len(read_recording(path)[1]) == 2


def test_total_size_is_bounded(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "r.gz", [HEADER, *[good(T0 + i) for i in range(50)]])
    with pytest.raises(RecordingError, match="once decompressed"):
        read_recording(path, max_total=20_000)


def test_line_reader_keeps_lines_across_chunks_and_members() -> None:
    lines = [b"x" * n for n in (1, 70_000, 300_000, 5)]
    body = b"\n".join(lines) + b"\n"
    two_members = gzip.compress(body[:100_000]) + gzip.compress(body[100_000:])
    for data in (body, gzip.compress(body), two_members):
        with reader_for_bytes(data, "t") as reader:
            assert [line for _n, line in reader] == lines


def test_a_stream_cut_mid_line_marks_the_last_line_incomplete() -> None:
    with reader_for_bytes(b"one\ntwo", "t") as reader:
        got = list(reader)
        assert got == [(1, b"one"), (2, b"two")] and not reader.complete


def test_corrupt_compressed_data_names_where(tmp_path: Path) -> None:
    data = bytearray(gzip.compress(json.dumps(HEADER).encode() + b"\n" + b"x" * 100_000))
    data[40:60] = b"\xff" * 20
    reader = LineReader(open(_write(tmp_path / "c.gz", bytes(data)), "rb"), "c")
    with reader, pytest.raises(RecordingError, match="corrupt compressed data"):
        list(reader)


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# -- hostile values --------------------------------------------------------------------


def _set(data: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    node: Any = data
    *parents, last = dotted.split(".")
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[last] = value
    return data


# (path in the snapshot, value, the value decoded: None = N/A; "error" = refused)
HOSTILE = [
    ("timestamp_s", 1e20, "error"),
    ("timestamp_s", float("inf"), "error"),
    ("timestamp_s", float("nan"), "error"),
    ("timestamp_s", -5.0, "error"),
    ("processes.0.start_time_s", 1e20, None),
    ("processes.0.start_time_s", float("nan"), None),
    ("processes.0.ppid", 10**400, None),
    ("processes.0.pid", 10**400, "error"),
    ("processes.0.pid", -1, "error"),
    ("devices.0.util_gpu_pct", 1e9, None),
    ("devices.0.util_gpu_pct", -3.0, None),
    ("devices.0.mem_used_bytes", -1, None),
    ("devices.0.mem_total_bytes", 10**30, None),
    ("devices.0.power_w", float("-inf"), None),
    ("devices.0.gpm.tensor_activity_pct", 1e300, None),
    ("devices.0.name", "x" * 300_000, "error"),
    ("devices.0.bus_id", "x" * 300_000, None),
    ("processes.0.cmdline", ["a"] * 100_000, None),
    ("devices.0.throttle_reasons", ["x"] * 1000, None),
    ("host.cpu_per_core_pct", [1e9], "error"),
    ("host.cpu_count", 0, None),
    ("host.uptime_s", 1e300, None),
    ("sample_latency_ms", float("inf"), None),
    ("devices.0.index", True, "error"),
    ("schema", None, "error"),
    ("schema", "1", "error"),
    ("schema", -1, "error"),
]


def _get(snapshot: Any, dotted: str) -> Any:
    node = snapshot
    for key in dotted.split("."):
        node = node[int(key)] if isinstance(node, tuple) else getattr(node, key)
    return node


@pytest.mark.parametrize(("where", "value", "expected"), HOSTILE)
def test_hostile_values_are_na_or_one_clear_error(
    tmp_path: Path, where: str, value: Any, expected: Any
) -> None:
    path = write_lines(tmp_path / "h.gz", [HEADER, _set(good(), where, value)])
    if expected == "error":
        with pytest.raises(RecordingError) as info:
            read_recording(path)
        assert "line 2" in str(info.value) and "\n" not in str(info.value)
        assert len(str(info.value)) < 300
    else:
        snapshot = read_recording(path)[1][0]
        assert _get(snapshot, where) is expected


def test_cli_on_hostile_recordings_exits_0_or_2_and_json_is_always_valid(
    tmp_path: Path,
) -> None:
    # One subprocess per case would be slow: the cases that decode go in one file
    # each pass; every refused one is checked through the library above.
    na_cases = [(w, v) for w, v, e in HOSTILE if e != "error"]
    snapshot = good()
    for where, value in na_cases:
        _set(snapshot, where, value)
    path = write_lines(tmp_path / "all.gz", [HEADER, snapshot])
    proc = run_cli("--replay", str(path), "--once", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["processes"][0]["start_time_s"] is None
    assert doc["devices"][0]["util_gpu_pct"] is None
    text = run_cli("--replay", str(path), "--once")
    assert text.returncode == 0 and "Traceback" not in text.stderr, text.stderr
    bad = write_lines(tmp_path / "bad.gz", [HEADER, good(timestamp_s=1e20)])
    for extra in ((), ("--json",)):
        proc = run_cli("--replay", str(bad), "--once", *extra)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr.count("\n") == 1 and "out of range" in proc.stderr


def test_deep_nesting_is_not_json_not_a_crash(tmp_path: Path) -> None:
    deep = b'{"timestamp_s": 1, "host": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    path = write_lines(tmp_path / "d.gz", [HEADER, good(), deep, good(T0 + 1)])
    with pytest.raises(RecordingError, match="line 3 is not valid JSON"):
        read_recording(path)


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (None, "is not a schema version"),
        ("2", "is not a schema version"),
        (-4, "is not a schema version"),
        (0, "is not a schema version"),
        (True, "is not a schema version"),
        (writing.COMPACT_SCHEMA + 1, "newer than this gputui"),
    ],
)
def test_header_schema_is_checked(tmp_path: Path, schema: Any, message: str) -> None:
    path = write_lines(tmp_path / "s.gz", [{**HEADER, "schema": schema}, good()])
    with pytest.raises(RecordingError, match=message):
        read_recording(path)


def test_header_values_out_of_range_are_ignored(tmp_path: Path) -> None:
    head = {**HEADER, "interval_s": 1e300, "created_s": float("nan"), "note": 5}
    path = write_lines(tmp_path / "s.gz", [head, good(), good(T0 + 2)])
    header, _ = read_recording(path)
    assert header.interval_s is None and header.created_s is None and header.note is None
    # the cadence then comes from the snapshots' own times
    assert ReplaySource.from_file(path).natural_interval_s == 2.0


# -- streaming -------------------------------------------------------------------------


def test_opening_reads_only_the_first_snapshot(tmp_path: Path) -> None:
    # A bad line later on is met when it is played, not at open: --once does not read it.
    path = write_lines(tmp_path / "r.gz", [HEADER, good(), good(T0 + 1), b"{oops", good(T0 + 3)])
    proc = run_cli("--replay", str(path), "--once", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["timestamp_s"] == T0
    source = ReplaySource.from_file(path)
    assert source.sample().timestamp_s == T0
    assert source.sample().timestamp_s == T0 + 1
    with pytest.raises(RecordingError, match="line 4 is not valid JSON"):
        source.sample()
    # the replay goes on after a damaged line, then loops
    assert source.sample().timestamp_s == T0 + 3
    assert source.sample().timestamp_s == T0 and source.loops == 1
    assert source.progress().total == 4
    source.close()


def test_progress_counts_the_snapshots(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "r.gz", [HEADER, *[good(T0 + i) for i in range(7)]])
    source = ReplaySource.from_file(path)
    assert source.count() == 7
    source.sample()
    assert source.progress().position == 1 and source.progress().total == 7
    source.close()


# -- file modes ------------------------------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_recordings_are_written_0600_even_over_an_existing_file(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        fresh = tmp_path / "new.jsonl.gz"
        writer = RecordingWriter(fresh, interval_s=1.0)
        writer.write(make_snapshot(T0))
        writer.close()
        assert _mode(fresh) == 0o600
        existing = tmp_path / "old.jsonl.gz"
        existing.write_bytes(b"")
        existing.chmod(0o644)
        recorder = AttachRecorder(existing, {"type": "hello", "v": 1}, pid=123)
        recorder.write({"type": "status"})
        recorder.close()
        assert _mode(existing) == 0o600
        assert read_attach_recording(existing).messages[0][1] == {"type": "status"}
    finally:
        os.umask(old)


# -- formats users have --------------------------------------------------------------

#: the process keys schema 2 added (and the Slurm job since, without a new
#: schema number), and the values a snapshot without them reads as
V2_PROCESS_DEFAULTS = {"container": None, "host_pid": None, "slurm": None}
#: the device keys added since (Xid errors), and the values an older snapshot reads as
DEVICE_DEFAULTS: dict[str, Any] = {"xid_errors": [], "xid_counts": [], "xid_sources": None}


def _as_v1(doc: dict[str, Any]) -> dict[str, Any]:
    """A snapshot's JSON as schema 1 wrote it: later versions added keys only,
    and a schema 1 snapshot reads them as their defaults."""
    doc = dict(doc)
    doc.pop("schema")
    processes = []
    for process in doc["processes"]:
        added = {key: process[key] for key in V2_PROCESS_DEFAULTS}
        assert added == V2_PROCESS_DEFAULTS
        processes.append({k: v for k, v in process.items() if k not in V2_PROCESS_DEFAULTS})
    doc["processes"] = processes
    devices = []
    for device in doc["devices"]:
        assert {key: device[key] for key in DEVICE_DEFAULTS} == DEVICE_DEFAULTS
        devices.append({k: v for k, v in device.items() if k not in DEVICE_DEFAULTS})
    doc["devices"] = devices
    return doc


def test_monitor_recording_format_1_still_replays() -> None:
    header, snapshots = read_recording(SAMPLES / "monitor-v1.jsonl.gz")
    assert header.schema == 1 and header.interval_s == 0.5 and len(snapshots) == 30
    assert all(s.devices and s.devices[0].name == "NVIDIA H100 80GB HBM3" for s in snapshots)
    # every value of the real recording is in range: nothing became N/A on the way
    raw = gzip.decompress((SAMPLES / "monitor-v1.jsonl.gz").read_bytes()).splitlines()
    for line, snapshot in zip(raw[1:], snapshots, strict=True):
        written = json.loads(line)
        written.pop("schema")
        assert _as_v1(snapshot_to_json(snapshot)) == written
    source = ReplaySource.from_file(SAMPLES / "monitor-v1.jsonl.gz")
    assert [source.sample() for _ in range(30)] == snapshots
    source.close()


def test_embedded_demos_decode_unchanged() -> None:
    from importlib import resources

    _header, snapshots = read_demo()
    raw = resources.files("gputui.data").joinpath("demo.jsonl.gz").read_bytes()
    lines = gzip.decompress(raw).splitlines()[1:]
    assert len(lines) == len(snapshots)
    for line, snapshot in zip(lines, snapshots, strict=True):
        assert _as_v1(snapshot_to_json(snapshot)) | {"schema": 1} == json.loads(line)
    attach = resources.files("gputui.data").joinpath("attach_demo.jsonl.gz").read_bytes()
    recording = read_attach_bytes(attach, "attach demo")
    assert len(recording.messages) == len(gzip.decompress(attach).splitlines()) - 2


def test_attach_recording_format_1_still_replays() -> None:
    recording = read_attach_recording(SAMPLES / "attach-v1.jsonl.gz")
    assert recording.pid and recording.hello["type"] == "hello"
    kinds = {msg["type"] for _t, msg in recording.messages}
    assert {"steps", "memory", "capture_result"} <= kinds
    times = [t for t, _msg in recording.messages]
    assert times == sorted(times) and times[-1] > 10


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([], "not a gputui attach recording"),
        ([{"type": "gputui-attach-recording", "version": None}], "is not valid"),
        ([{"type": "gputui-attach-recording", "version": 9}], "newer"),
        ([{"type": "gputui-attach-recording", "version": 1}, [1]], "no hello"),
        (
            [
                {"type": "gputui-attach-recording", "version": 1},
                {"type": "hello"},
                {"t": 1e300, "msg": {}},
                {"t": 1, "msg": {}},
            ],
            "line 3 is not a recorded message",
        ),
    ],
)
def test_bad_attach_recordings_give_one_line(lines: list[Any], message: str) -> None:
    data = gzip.compress(b"".join(json.dumps(x).encode() + b"\n" for x in lines))
    with pytest.raises(RecordingError, match=message):
        read_attach_bytes(data, "a")


def test_attach_messages_carry_no_infinity_nan_or_huge_integer() -> None:
    lines = [
        b'{"type": "gputui-attach-recording", "version": 1, "pid": 1e999}',
        b'{"type": "hello", "x": NaN}',
        b'{"t": 1, "msg": {"a": 1e999, "b": -Infinity, "c": ' + b"9" * 400 + b', "d": 2}}',
    ]
    recording = read_attach_bytes(b"\n".join(lines) + b"\n", "a")
    assert recording.pid is None and recording.hello == {"type": "hello", "x": None}
    assert recording.messages == [(1.0, {"a": None, "b": None, "c": None, "d": 2})]


def test_gputui_record_writes_0600(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    import gputui.sources.live
    from gputui.commands import record
    from tests.helpers.synthetic import make_snapshots, replay_source

    snapshots = make_snapshots(n_steps=3)
    monkeypatch.setattr(gputui.sources.live, "LiveSource", lambda: replay_source(snapshots))
    # the command's SIGTERM handler must not outlive the test
    monkeypatch.setattr(signal, "signal", lambda *_args: None)
    out = tmp_path / "session.jsonl.gz"
    out.write_bytes(b"")
    out.chmod(0o644)
    args = argparse.Namespace(
        output=str(out),
        interval=0.1,
        duration=0.1,
        note=None,
        quiet=True,
        replay=None,
        demo=False,
        start=None,
    )
    assert record.main(args) == 0
    assert _mode(out) == 0o600
    assert read_recording(out)[1][0] == snapshots[0]


def test_each_kind_of_recording_names_the_other_command() -> None:
    with pytest.raises(RecordingError, match="gputui attach --replay"):
        ReplaySource.from_file(SAMPLES / "attach-v1.jsonl.gz")
    with pytest.raises(RecordingError, match="gputui --replay"):
        read_attach_recording(SAMPLES / "monitor-v1.jsonl.gz")


def test_every_number_in_the_model_has_a_range() -> None:
    import dataclasses
    import typing

    from gputui.snapshot import codec, model

    classes = [model.Snapshot, model.HostSnapshot, model.DeviceSnapshot, model.ProcessSnapshot]
    classes += [model.GpmMetrics, model.MigInstance]
    missing = []
    for cls in classes:
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            text = str(hints[field.name])
            numeric = ("float" in text or "int" in text) and "Snapshot" not in text
            if numeric and codec._range_of(f"{cls.__name__}.{field.name}") is None:
                missing.append(f"{cls.__name__}.{field.name}")
    assert missing == []


# -- compact recordings ------------------------------------------------------------------


def _node(t: float, count: int, busy: int) -> Snapshot:
    """``count`` processes; the one at ``busy`` changed at this instant, one new
    process every 3 s (the others keep their places and values)."""
    base = make_snapshot(t)
    procs = [
        dataclasses.replace(
            base.processes[0],
            pid=100 + i + (1000 if i == 0 and int(t) % 3 == 0 else 0),
            cpu_pct=float(int(t) % 50) if i == busy else 1.0,
            cmdline=("serve", f"--shard={i}"),
            start_time_s=T0 - 100.0,
        )
        for i in range(count)
    ]
    return dataclasses.replace(base, processes=tuple(procs))


@pytest.mark.parametrize("compact_from", [5, 6])
def test_a_node_of_many_processes_is_recorded_compact_and_replays_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compact_from: int
) -> None:
    monkeypatch.setattr(writing, "FULL_EVERY", 4)
    snapshots = [_node(T0 + n, 5, busy=n % 5) for n in range(10)]
    path = tmp_path / "node.jsonl.gz"
    writer = RecordingWriter(path, interval_s=1.0, compact_from=compact_from)
    for snap in snapshots:
        writer.write(snap)
    writer.close()
    lines = gzip.decompress(path.read_bytes()).splitlines()
    header = json.loads(lines[0])
    compact = compact_from <= 5
    assert header["schema"] == (writing.COMPACT_SCHEMA if compact else writing.SCHEMA_VERSION)
    pids_alone = [len(re.findall(rb'\{"pid":\d+\}', line)) for line in lines[1:]]
    if compact:
        # the first line and every FULL_EVERY-th whole; the others hold the
        # processes that did not change as their pid alone
        assert [n for n, k in enumerate(pids_alone) if k == 0] == [0, 4, 8]
        assert all(k >= 1 for n, k in enumerate(pids_alone) if n % 4)
    else:
        assert not any(pids_alone)
    assert read_recording(path)[1] == snapshots
    # streamed, twice round (the first line of a pass after the last of the one before)
    source = ReplaySource.from_file(path)
    try:
        played = [source.sample() for _ in range(2 * len(snapshots))]
    finally:
        source.close()
    assert played == snapshots * 2


def test_a_compact_recording_is_too_new_for_a_gputui_that_reads_snapshots_alone() -> None:
    # What a gputui before compact recordings checks a header's schema against.
    from gputui.snapshot.codec import DecodeError, check_schema

    with pytest.raises(DecodeError, match="newer than this gputui"):
        check_schema(writing.COMPACT_SCHEMA, "recording", writing.SCHEMA_VERSION)


def test_a_damaged_line_of_a_compact_recording_costs_the_lines_up_to_the_next_whole_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writing, "FULL_EVERY", 4)
    snapshots = [_node(T0 + n, 5, busy=n % 5) for n in range(8)]
    path = tmp_path / "node.jsonl.gz"
    writer = RecordingWriter(path, interval_s=1.0, compact_from=1)
    for snap in snapshots:
        writer.write(snap)
    writer.close()
    lines = gzip.decompress(path.read_bytes()).splitlines()
    lines[2] = lines[2][:40]  # the second snapshot's line cut short
    write_lines(path, list(lines))
    source = ReplaySource.from_file(path)
    errors: list[str] = []
    played: list[Snapshot] = []
    try:
        for _ in range(7):
            try:
                played.append(source.sample())
            except RecordingError as exc:
                errors.append(str(exc))
    finally:
        source.close()
    assert "line 3 is not valid JSON" in errors[0]
    assert all("no such process" in e for e in errors[1:])
    assert len(errors) == 3  # lines 3-5: snapshots 2-4; the fifth is whole
    assert played[0] == snapshots[0]
    assert played[1:4] == snapshots[4:7]


def test_each_line_is_the_snapshot_encoded_whole_though_unchanged_processes_are_not_encoded_again(
    tmp_path: Path,
) -> None:
    # The writer takes the JSON of a process that is the same object at the same
    # place as in the snapshot before; the line is what encoding it whole gives.
    base = _node(T0, 4, busy=0)
    kept = base.processes
    snapshots = [
        base,
        dataclasses.replace(make_snapshot(T0 + 1), processes=kept),  # the same objects
        dataclasses.replace(
            make_snapshot(T0 + 2),
            processes=(kept[0], dataclasses.replace(kept[1], cpu_pct=42.0), *kept[2:]),
        ),
        dataclasses.replace(make_snapshot(T0 + 3), processes=(kept[1], kept[0])),  # moved
        dataclasses.replace(make_snapshot(T0 + 4), processes=()),
    ]
    path = tmp_path / "r.jsonl.gz"
    writer = RecordingWriter(path, interval_s=1.0)
    for snap in snapshots:
        writer.write(snap)
    writer.close()
    lines = gzip.decompress(path.read_bytes()).splitlines()[1:]
    assert lines == [
        json.dumps(snapshot_to_json(snap), separators=(",", ":"), allow_nan=False).encode()
        for snap in snapshots
    ]


def test_a_snapshot_too_big_for_a_line_is_refused_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every line the writer writes is one the reader takes.
    monkeypatch.setattr(writing, "MAX_LINE_BYTES", 3000)
    path = tmp_path / "big.jsonl.gz"
    writer = RecordingWriter(path, interval_s=1.0, compact_from=1)
    small = [_node(T0 + n, 2, busy=n % 2) for n in range(3)]
    writer.write(small[0])
    with pytest.raises(RecordingError, match=r"a snapshot of 40 processes is .* over the"):
        writer.write(_node(T0 + 1, 40, busy=0))
    # the next line stands on the last one written, not on the one refused
    writer.write(small[1])
    writer.write(small[2])
    writer.close()
    assert read_recording(path)[1] == small


_PIDS = st.integers(1, 6)


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.lists(st.tuples(_PIDS, st.sampled_from([0.0, 1.0, 2.5]), st.booleans()), max_size=6),
        min_size=1,
        max_size=8,
    ),
    full_every=st.integers(1, 4),
)
def test_any_run_of_snapshots_recorded_compact_reads_back_the_same(
    tmp_path_factory: pytest.TempPathFactory,
    steps: list[list[tuple[int, float, bool]]],
    full_every: int,
) -> None:
    # Processes come, go, move, change or stay (the same object, or an equal
    # one): the compact recording plays back exactly what was written.
    made: dict[tuple[int, float, bool], Any] = {}
    base = make_snapshot(T0).processes[0]
    snapshots = []
    for n, procs in enumerate(steps):
        values = tuple(
            made.setdefault(
                key,
                dataclasses.replace(base, pid=key[0], cpu_pct=key[1], hooked=key[2]),
            )
            if key[2]
            else dataclasses.replace(base, pid=key[0], cpu_pct=key[1])
            for key in procs
        )
        snapshots.append(dataclasses.replace(make_snapshot(T0 + n), processes=values))
    path = tmp_path_factory.mktemp("rec") / "r.jsonl.gz"
    original = writing.FULL_EVERY
    writing.FULL_EVERY = full_every
    try:
        writer = RecordingWriter(path, interval_s=1.0, compact_from=0)
        for snap in snapshots:
            writer.write(snap)
        writer.close()
    finally:
        writing.FULL_EVERY = original
    assert json.loads(gzip.decompress(path.read_bytes()).splitlines()[0])["schema"] == (
        writing.COMPACT_SCHEMA
    )
    assert read_recording(path)[1] == snapshots
    source = ReplaySource.from_file(path)
    try:
        assert [source.sample() for _ in range(2 * len(snapshots))] == snapshots * 2
    finally:
        source.close()
