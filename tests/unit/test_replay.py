from __future__ import annotations

import dataclasses
import gzip
import json
import re
from pathlib import Path

import pytest

from gputui.recording.replay import (
    RecordingError,
    RecordingWriter,
    ReplaySource,
    _file_opener,
    _StreamPlayer,
    read_demo,
    read_recording,
)
from gputui.snapshot.codec import DecodeError, snapshot_from_json, snapshot_to_json
from gputui.snapshot.model import (
    SCHEMA_VERSION,
    DeviceSnapshot,
    GpmMetrics,
    HostSnapshot,
    MigInstance,
    ProcessSnapshot,
    Snapshot,
)
from tests.helpers.deadlines import WAIT_S


def make_snapshot(t: float, util: float = 50.0) -> Snapshot:
    device = DeviceSnapshot(
        index=0,
        name="NVIDIA H100 80GB HBM3",
        uuid="GPU-0000",
        util_gpu_pct=util,
        mem_used_bytes=10 * 2**30,
        mem_total_bytes=80 * 2**30,
        throttle_reasons=("sw_power_cap",),
        gpm_supported=True,
        gpm=GpmMetrics(sm_activity_pct=96.0, tensor_activity_pct=93.0, dram_bw_util_pct=24.0),
        mig_instances=(MigInstance(gpu_instance_id=1, name="1g.10gb"),),
    )
    proc = ProcessSnapshot(
        pid=1234,
        gpu_index=0,
        gpu_uuid="GPU-0000",
        type="compute",
        gpu_mem_bytes=2**30,
        cmdline=("python", "train.py"),
        start_time_s=t - 100,
    )
    host = HostSnapshot(hostname="node1", cpu_count=2, cpu_per_core_pct=(1.0, 2.0))
    return Snapshot(timestamp_s=t, host=host, devices=(device,), processes=(proc,))


def test_codec_round_trip_keeps_every_field() -> None:
    snap = make_snapshot(1000.0)
    assert snapshot_from_json(json.loads(json.dumps(snapshot_to_json(snap)))) == snap


def test_codec_ignores_unknown_keys_and_defaults_missing_ones() -> None:
    data = snapshot_to_json(make_snapshot(1.0))
    data["devices"][0]["future_metric"] = 7
    del data["devices"][0]["fan_pct"]
    snap = snapshot_from_json(data)
    assert snap.devices[0].fan_pct is None
    assert snap.devices[0].util_gpu_pct == 50.0


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d["devices"][0].__setitem__("index", "zero"),
        lambda d: d["devices"][0].__setitem__("throttle_reasons", "sw_power_cap"),
        lambda d: d.__setitem__("devices", {"0": {}}),
        lambda d: d.__setitem__("schema", SCHEMA_VERSION + 1),
        lambda d: d["processes"][0].pop("pid"),
    ],
)
def test_codec_rejects_values_of_the_wrong_shape(mutate) -> None:  # type: ignore[no-untyped-def]
    data = snapshot_to_json(make_snapshot(1.0))
    mutate(data)
    with pytest.raises(DecodeError):
        snapshot_from_json(data)


def test_recording_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl.gz"
    snaps = [make_snapshot(1000.0 + i, util=float(i)) for i in range(25)]
    writer = RecordingWriter(path, interval_s=0.5, note="unit test")
    for s in snaps:
        writer.write(s)
    writer.close()
    header, read = read_recording(path)
    assert read == snaps
    assert header.interval_s == 0.5 and header.note == "unit test"


def test_replay_loops_and_keeps_recorded_time(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl.gz"
    writer = RecordingWriter(path, interval_s=2.0)
    for i in range(3):
        writer.write(make_snapshot(100.0 + 2 * i, util=float(i)))
    writer.close()
    source = ReplaySource.from_file(path, speed=4.0)
    assert source.is_recording
    assert source.natural_interval_s == 0.5
    utils = [source.sample().devices[0].util_gpu_pct for _ in range(7)]
    assert utils == [0.0, 1.0, 2.0, 0.0, 1.0, 2.0, 0.0]
    assert source.loops == 2


def test_truncated_recording_keeps_what_was_flushed(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl.gz"
    writer = RecordingWriter(path, interval_s=1.0)
    for i in range(20):
        writer.write(make_snapshot(float(i)))
    writer.flush()
    # Simulate a recorder killed before close(): the gzip trailer never gets written.
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 3])
    _, snaps = read_recording(path)
    assert 10 <= len(snaps) <= 20


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"hello world\n", "not a gputui recording"),
        (b'{"type": "something-else"}\n', "not a gputui recording"),
        (b'{"type": "gputui-recording", "schema": 999}\n{}\n', "newer than this gputui"),
        (b'{"type": "gputui-recording", "schema": 1}\n', "holds no snapshots"),
        (b'{"type": "gputui-recording", "schema": 1}\n{"timestamp_s": "x"}\n', "line 2"),
        (b"\x1f\x8b\x08\x00garbage-garbage", "corrupt compressed data"),
    ],
)
def test_bad_recordings_give_one_line_errors(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.gz"
    path.write_bytes(content)
    with pytest.raises(RecordingError, match=message) as info:
        read_recording(path)
    assert "\n" not in str(info.value)


def test_missing_recording(tmp_path: Path) -> None:
    with pytest.raises(RecordingError, match="not found"):
        read_recording(tmp_path / "nope.gz")
    with pytest.raises(RecordingError, match="directory"):
        read_recording(tmp_path)


def test_plain_uncompressed_recordings_are_read(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl.gz"
    writer = RecordingWriter(path, interval_s=1.0)
    writer.write(make_snapshot(1_700_000_005.0))
    writer.close()
    plain = tmp_path / "rec.jsonl"
    plain.write_bytes(gzip.decompress(path.read_bytes()))
    assert read_recording(plain)[1] == [make_snapshot(1_700_000_005.0)]


def test_embedded_demo_is_a_real_recording_under_2_mb() -> None:
    import importlib.resources

    raw = importlib.resources.files("gputui.data").joinpath("demo.jsonl.gz").read_bytes()
    assert len(raw) < 2 * 1024 * 1024
    header, snaps = read_demo()
    assert len(snaps) >= 60
    assert header.hostname and header.note
    gpus = {d.name for s in snaps for d in s.devices}
    assert any("H100" in name for name in gpus)
    # Real sessions: a busy training process plus a second GPU process, GPM values present.
    assert max(len(s.processes) for s in snaps) >= 2
    assert any(d.gpm and d.gpm.tensor_activity_pct for s in snaps for d in s.devices)


def test_demo_source_decodes_as_it_plays_the_same_snapshots() -> None:
    # The demo source streams (launch time); it must play what read_demo reads.
    header, snaps = read_demo()
    source = ReplaySource.demo()
    assert source.natural_interval_s == header.interval_s
    assert source.count() == len(snaps)
    assert [source.sample() for _ in range(len(snaps))] == snaps
    assert source.loops == 0 and source.position == len(snaps)
    assert source.sample() == snaps[0]
    assert source.loops == 1 and source.position == 1


def _stream_source(path: Path, **player_args: int) -> tuple[ReplaySource, _StreamPlayer]:
    player = _StreamPlayer(_file_opener(path), 2**30, **player_args)
    return ReplaySource(player.header, (), "recording: rec", player=player), player


def _write(path: Path, snaps: list[Snapshot]) -> None:
    writer = RecordingWriter(path, interval_s=1.0)
    for snap in snaps:
        writer.write(snap)
    writer.close()


def test_a_small_recording_is_decoded_once_then_plays_from_memory(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl.gz"
    snaps = [make_snapshot(1_700_000_000.0 + i, util=float(i)) for i in range(12)]
    _write(path, snaps)
    source, player = _stream_source(path)
    # Five played from the stream; the preload arrives mid-pass.
    played = [source.sample() for _ in range(5)]
    source.count()
    player.join(WAIT_S)
    assert player.preloaded == tuple(snaps) and source.total == 12
    # The file is no longer read: gone, the replay plays on, in order, pass after pass.
    path.unlink()
    played += [source.sample() for _ in range(7 + 12 + 3)]
    assert played == snaps + snaps + snaps[:3]
    assert source.loops == 2 and source.position == 3


def test_a_recording_over_the_preload_size_streams_every_pass(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl.gz"
    snaps = [make_snapshot(1_700_000_000.0 + i) for i in range(4)]
    _write(path, snaps)
    source, player = _stream_source(path, preload_max=100)
    source.count()
    player.join(WAIT_S)
    assert player.preloaded is None and source.total == 4
    assert [source.sample() for _ in range(6)] == snaps + snaps[:2]
    path.unlink()  # the next pass reopens the file
    source.sample(), source.sample()
    with pytest.raises(RecordingError):
        source.sample()


@pytest.mark.parametrize(("most", "preloaded"), [(4, True), (3, False)])
def test_a_recording_of_more_processes_than_the_preload_holds_streams(
    tmp_path: Path, most: int, preloaded: bool
) -> None:
    # A compact recording's lines are small for what they hold: the preload
    # counts the processes its snapshots hold too (one a snapshot here).
    path = tmp_path / "rec.jsonl.gz"
    snaps = [make_snapshot(1_700_000_000.0 + i) for i in range(4)]
    _write(path, snaps)
    source, player = _stream_source(path, preload_max_processes=most)
    source.count()
    player.join(WAIT_S)
    assert (player.preloaded is not None) == preloaded and source.total == 4
    assert [source.sample() for _ in range(6)] == snaps + snaps[:2]


def test_a_recording_with_a_damaged_line_is_not_preloaded(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl.gz"
    snaps = [make_snapshot(1_700_000_000.0 + i) for i in range(3)]
    _write(path, snaps)
    lines = gzip.decompress(path.read_bytes()).splitlines(keepends=True)
    lines.insert(2, b'{"timestamp_s": "x"}\n')
    path.write_bytes(gzip.compress(b"".join(lines)))
    source, player = _stream_source(path)
    source.count()
    player.join(WAIT_S)
    assert player.preloaded is None
    # The damaged line is said on every pass, as before.
    for _ in range(2):
        assert source.sample() == snaps[0]
        with pytest.raises(RecordingError, match="line 3"):
            source.sample()
        assert [source.sample(), source.sample()] == snaps[1:]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("util_gpu_pct", 50), ("util_gpu_pct", 50.0), ("util_gpu_pct", 111.0),
        ("util_gpu_pct", float("nan")), ("util_gpu_pct", True), ("util_gpu_pct", "50"),
        ("index", 3), ("index", 3.0), ("index", -1), ("index", False), ("index", None),
        ("name", "H100"), ("name", "x" * (2**17 + 1)), ("name", 7), ("name", None),
        ("gpm_supported", True), ("gpm_supported", 1), ("gpm_supported", None),
        ("fan_pct", None), ("fan_pct", 2**70),
    ],
    ids=lambda value: repr(value)[:16],
)  # fmt: skip
def test_codec_inline_values_decode_as_the_field_converter_does(field: str, value: object) -> None:
    # The common value is taken inline; it must give exactly what the field's own
    # converter gives (type included: an int in a float field becomes a float),
    # and everything else the same result or the same error.
    import typing

    from gputui.snapshot.codec import _converter, from_json

    hint = typing.get_type_hints(DeviceSnapshot)[field]
    convert = _converter(hint, f"DeviceSnapshot.{field}")
    data = snapshot_to_json(make_snapshot(1.0))["devices"][0]
    data[field] = value
    try:
        expected: object = convert(value)
    except DecodeError as exc:
        with pytest.raises(DecodeError, match=re.escape(str(exc))):
            from_json(DeviceSnapshot, data)
        return
    got = getattr(from_json(DeviceSnapshot, data), field)
    assert got == expected and type(got) is type(expected)


def test_a_recording_still_being_written_is_not_preloaded_and_grows(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl.gz"
    snaps = [make_snapshot(1_700_000_000.0 + i) for i in range(6)]
    writer = RecordingWriter(path, interval_s=1.0)
    for snap in snaps[:3]:
        writer.write(snap)
    writer.flush()  # readable, no end marker yet: the recorder is still at work
    source, player = _stream_source(path)
    source.count()
    player.join(WAIT_S)
    assert player.preloaded is None
    assert [source.sample() for _ in range(3)] == snaps[:3]
    for snap in snaps[3:]:
        writer.write(snap)
    writer.close()
    # What was written meanwhile plays (in this pass, or the next: it reopens the file).
    played = [source.sample() for _ in range(9)]
    assert all(snap in played for snap in snaps[3:])


@pytest.mark.parametrize("compact", [False, True])
def test_a_pass_takes_the_first_snapshot_again_while_its_line_is_the_same(
    tmp_path: Path, compact: bool
) -> None:
    path = tmp_path / "rec.jsonl.gz"
    snaps = [make_snapshot(1_700_000_000.0 + i, util=float(i)) for i in range(3)]
    snaps = [dataclasses.replace(s, processes=snaps[0].processes) for s in snaps]
    writer = RecordingWriter(path, interval_s=1.0, compact_from=0 if compact else 10**9)
    for snap in snaps:
        writer.write(snap)
    writer.close()
    source, _player = _stream_source(path, preload_max=0)
    try:
        first = [source.sample() for _ in range(3)]
        again = [source.sample() for _ in range(3)]
        assert first == snaps and again == snaps
        # compact: not decoded again (its unchanged process stays the same object
        # on the next line); a whole recording's pass decodes its first line
        assert (again[0] is first[0]) == compact
        assert again[1].processes[0] is first[0].processes[0]
        # the file rewritten with another first line: that one is read
        other = [make_snapshot(1_800_000_000.0 + i) for i in range(2)]
        _write(path, other)
        third = [source.sample() for _ in range(2)]
        assert third == other and third[0] is not first[0]
        assert third[0] is not again[0]
    finally:
        source.close()
