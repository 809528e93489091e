"""Property tests of recording decoding: whatever the bytes, the readers return a
value or raise RecordingError (a GputuiError: one line, exit 2), nothing else;
what they return is in range, encodes as strict JSON and renders."""

from __future__ import annotations

import copy
import dataclasses
import gzip
import io
import json
import os
import typing
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gputui.errors import GputuiError
from gputui.recording.attach import read_attach_bytes
from gputui.recording.io import MAX_TOTAL_BYTES, reader_for_bytes
from gputui.recording.replay import (
    RecordingError,
    RecordingHeader,
    ReplaySource,
    _read_whole,
    _StreamPlayer,
)
from gputui.reports import monitor as report
from gputui.snapshot.codec import field_types, snapshot_to_json
from gputui.snapshot.model import Snapshot
from tests.helpers.wire_strategies import json_values, mutate, mutated_message, paths
from tests.unit.test_replay import make_snapshot

EXAMPLES = int(os.environ.get("GPUTUI_PROPERTY_EXAMPLES", "120"))
PROPS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

T0 = 1_767_225_600.0
BASE = snapshot_to_json(make_snapshot(T0))
MONITOR_HEADER = {"type": "gputui-recording", "schema": 1, "interval_s": 1.0}
ATTACH_HEADER = {"type": "gputui-attach-recording", "version": 1, "pid": 42}

# Numbers at and around every range's edges, and the ones JSON readers mishandle.
NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 2**31, 2**63, 2**64, 10**24, 10**25, 10**400, -(10**400)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e20, 1e308, -1e308, 5e-324, 100.0, 100.5, 110.0, 2.0**33, 2.0**33 + 1]),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=20))
JSON = json_values(SCALARS)


PATHS = paths(BASE)


@st.composite
def mutated_snapshot(draw: st.DrawFn) -> Any:
    """A real snapshot with a few values (anywhere in it) replaced by any JSON."""
    if draw(st.integers(0, 9)) == 0:
        return draw(JSON)  # sometimes not a snapshot at all
    return mutate(draw, copy.deepcopy(BASE), PATHS, JSON)


def _line(value: Any) -> bytes:
    # Python's encoder writes NaN, Infinity and huge integers as a careless writer would.
    return json.dumps(value).encode()


@st.composite
def recording_bytes(draw: st.DrawFn, header: Any, body: st.SearchStrategy[Any]) -> bytes:
    lines = [_line(draw(st.one_of(st.just(header), JSON)) if draw(st.booleans()) else header)]
    lines += [_line(draw(body)) for _ in range(draw(st.integers(0, 4)))]
    if draw(st.integers(0, 4)) == 0:
        lines.insert(draw(st.integers(0, len(lines))), draw(st.binary(max_size=40)))
    data = b"\n".join(lines) + draw(st.sampled_from([b"\n", b""]))
    if draw(st.booleans()):
        data = gzip.compress(data, mtime=0)
    if draw(st.integers(0, 3)) == 0:
        data = data[: draw(st.integers(0, len(data)))]  # cut anywhere, compressed or not
    if draw(st.integers(0, 5)) == 0:
        at = draw(st.integers(0, max(0, len(data) - 1)))
        data = data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1 :]
    return data


def _render(snapshot: Any) -> None:
    source = ReplaySource(
        RecordingHeader(1, None, 1.0, None, None, None), [snapshot], "recording: t"
    )
    report.render(snapshot, source, "REPLAY", False, True, width=100)


@PROPS
@given(recording_bytes(MONITOR_HEADER, mutated_snapshot()))
def test_monitor_recording_decoding_raises_only_recording_error(data: bytes) -> None:
    assert issubclass(RecordingError, GputuiError)
    try:
        _header, snapshots = _read_whole(
            lambda max_total: reader_for_bytes(data, "p", max_total), MAX_TOTAL_BYTES
        )
    except RecordingError as exc:
        assert "\n" not in str(exc)
        return
    for snapshot in snapshots:
        # what decodes is in range: strict JSON out, and every view can show it
        json.dumps(snapshot_to_json(snapshot), allow_nan=False)
        _render(snapshot)


@PROPS
@given(recording_bytes(MONITOR_HEADER, mutated_snapshot()), st.integers(1, 12))
def test_monitor_replay_raises_only_recording_error(data: bytes, samples: int) -> None:
    try:
        player = _StreamPlayer(lambda max_total: reader_for_bytes(data, "p", max_total), 2**20)
        source = ReplaySource(player.header, (), "recording: p", player=player)
    except RecordingError:
        return
    for _ in range(samples):
        try:
            source.sample()
        except RecordingError as exc:
            assert "\n" not in str(exc)
    assert source.count(timeout_s=10) is not None or player.count_error is not None
    source.close()


MESSAGE = st.fixed_dictionaries(
    {"t": st.one_of(NUMBERS, SCALARS), "msg": st.one_of(JSON, st.just({"type": "steps"}))}
)


@PROPS
@given(
    recording_bytes(
        ATTACH_HEADER,
        st.one_of(st.just({"type": "hello", "v": 1}), MESSAGE, JSON),
    )
)
def test_attach_recording_decoding_raises_only_recording_error(data: bytes) -> None:
    try:
        recording = read_attach_bytes(data, "a")
    except RecordingError as exc:
        assert "\n" not in str(exc)
        return
    # what the replay will be fed is plain, finite JSON
    json.dumps([recording.hello, recording.messages], allow_nan=False)
    assert all(t >= 0 for t, _msg in recording.messages)


# -- attach recordings of real messages, mutated: the report and the screen take them ---------
def _demo_lines() -> tuple[Any, Any, list[Any]]:
    from pathlib import Path

    demo = Path(__file__).resolve().parents[2] / "gputui" / "data" / "attach_demo.jsonl.gz"
    lines = [json.loads(line) for line in gzip.open(demo, "rt").read().splitlines()]
    header, hello, rest = lines[0], lines[1], lines[2:]
    # a few of each kind: the capture, its statuses, steps, memory, status, GPU samples
    by_kind: dict[str, list[Any]] = {}
    for item in rest:
        by_kind.setdefault(item["msg"]["type"], []).append(item)
    keep = [item for items in by_kind.values() for item in items[:3]]
    return header, hello, keep


DEMO_HEADER, DEMO_HELLO, DEMO_MESSAGES = _demo_lines()


@st.composite
def mutated_attach_recording(draw: st.DrawFn) -> bytes:
    hello = draw(mutated_message()) if draw(st.integers(0, 4)) == 0 else DEMO_HELLO
    if isinstance(hello, dict) and draw(st.booleans()):
        hello = dict(hello, type="hello")
    items = []
    for _ in range(draw(st.integers(1, 8))):
        item = copy.deepcopy(draw(st.sampled_from(DEMO_MESSAGES)))
        if draw(st.booleans()):
            msg = draw(mutated_message())
            if isinstance(msg, dict) and draw(st.booleans()):
                msg["type"] = item["msg"]["type"]  # the same kind, damaged
            item["msg"] = msg
        items.append(item)
    lines = [_line(DEMO_HEADER), _line(hello), *(_line(i) for i in items)]
    return gzip.compress(b"\n".join(lines) + b"\n", mtime=0)


@PROPS
@given(mutated_attach_recording())
def test_attach_replay_of_damaged_real_messages_never_raises(data: bytes) -> None:
    """What ``attach --replay FILE --once`` and the attach screen do with a
    recording: every message becomes an event (or is skipped), the report
    prints and its JSON is strict, the screen's model builds its view."""
    import contextlib

    from gputui.protocol.fields import SchemaError
    from gputui.protocol.schema import Hello
    from gputui.reports import attach as attach_report
    from gputui.session.attach import AttachState, build_view
    from gputui.session.oneshot import JobReport
    from gputui.session.reading import Collected, deliver

    try:
        recording = read_attach_bytes(data, "a")
        hello = Hello.from_wire(recording.hello)
    except (RecordingError, SchemaError):
        return
    got = Collected.of_recording(hello, recording.messages)
    state = AttachState()
    state.set_hello(hello)
    for _t, msg in recording.messages:
        deliver(msg, state)
    report = JobReport.of(42, got, 1000)
    json.dumps(attach_report.report_dict(report), allow_nan=False)
    with contextlib.redirect_stdout(io.StringIO()):
        attach_report.print_report(report)
    build_view(state.snapshot(), now_s=T0, gpu_mode=True, columns=80)


def _value_classes(cls: type, seen: set[type]) -> set[type]:
    """``cls`` and every dataclass its fields hold, however nested."""
    if cls in seen or not dataclasses.is_dataclass(cls):
        return seen
    seen.add(cls)
    pending = list(typing.get_type_hints(cls).values())
    while pending:
        tp = pending.pop()
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            _value_classes(tp, seen)
        pending.extend(typing.get_args(tp))
    return seen


def test_the_codec_reads_each_fields_type_as_get_type_hints_does() -> None:
    """The codec evaluates each distinct annotation once (start-up time): the
    types it gets are get_type_hints's, for every class a snapshot holds."""
    classes = _value_classes(Snapshot, set())
    assert len(classes) >= 6  # the control: the walk reached the nested classes
    for cls in classes:
        hints = typing.get_type_hints(cls)  # also a base's annotations of non-fields
        fields = {f.name for f in dataclasses.fields(cls)}
        assert field_types(cls) == {name: hints[name] for name in fields}, cls.__name__
