"""Property tests of the wire: whatever bytes or values a peer sends, frame
decoding raises only FrameError, schema validation only SchemaError, and the
viewer's event parser nothing at all; what decodes is in range and re-encodes
as strict JSON."""

from __future__ import annotations

import copy
import gzip
import itertools
import json
import os
import struct
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gputui.collectors.hook_client import Disconnected, Invalid, parse_event
from gputui.protocol import framing, messages
from gputui.protocol.fields import SchemaError
from gputui.protocol.wire import _DECODERS, decode, encode_message

EXAMPLES = int(os.environ.get("GPUTUI_PROPERTY_EXAMPLES", "120"))
PROPS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
DEMO = Path(__file__).resolve().parents[2] / "gputui" / "data" / "attach_demo.jsonl.gz"


def _real_messages() -> list[dict[str, Any]]:
    """One message of every type a real job sent (the embedded demo), plus the
    viewer's requests: the starting points the mutations below work on."""
    lines = gzip.open(DEMO, "rt").read().splitlines()
    found: dict[str, dict[str, Any]] = {"hello": json.loads(lines[1])}
    for line in lines[2:]:
        msg = json.loads(line)["msg"]
        found.setdefault(msg["type"], msg)
    found.update(
        {
            messages.SUBSCRIBE: {"v": 1, "type": "subscribe", "history": 100, "memory": True},
            messages.CAPTURE: {"v": 1, "type": "capture", "id": "1-1", "steps": 5, "warmup": 1},
            messages.CAPTURE_CANCEL: {"v": 1, "type": "capture_cancel"},
            messages.PING: {"v": 1, "type": "ping"},
            messages.PONG: {"v": 1, "type": "pong", "t": 1.5},
            messages.BYE: {"v": 1, "type": "bye", "pid": 7, "steps": 3},
            messages.ERROR: {"v": 1, "type": "error", "message": "x"},
        }
    )
    return list(found.values())


REAL = _real_messages()
TYPES = sorted(_DECODERS)

NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 2**31, 2**63, 2**64, 10**24, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e20, 1e308, -1e308, 5e-324, 1e11, 1e8 + 1]),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=20), st.sampled_from(TYPES))
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node[:3]):
            out += _paths(value, (*prefix, i))
    return out


@st.composite
def mutated_message(draw: st.DrawFn) -> Any:
    """A real message with a few values anywhere in it replaced by any JSON
    (a type swapped for another sometimes), or any JSON object at all."""
    if draw(st.integers(0, 9)) == 0:
        value = draw(JSON)
        if isinstance(value, dict) and draw(st.booleans()):
            value["type"] = draw(st.sampled_from(TYPES))
        return value
    data = copy.deepcopy(draw(st.sampled_from(REAL)))
    if draw(st.integers(0, 7)) == 0:
        data["type"] = draw(st.sampled_from(TYPES))
    paths = _paths(data)
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(paths))
        node = data
        try:  # an earlier change may have replaced a parent of this path
            for key in path[:-1]:
                node = node[key]
            if draw(st.integers(0, 5)) == 0 and isinstance(node, dict):
                node.pop(path[-1], None)
            else:
                node[path[-1]] = draw(JSON)
        except (KeyError, IndexError, TypeError):
            continue
    return data


def test_every_real_message_decodes() -> None:
    assert {m["type"] for m in REAL} == set(TYPES)
    for msg in REAL:
        decoded = decode(msg)
        assert decoded is not None
        assert decode(json.loads(json.dumps(decoded.to_wire()))) == decoded


@PROPS
@given(mutated_message())
def test_schema_validation_raises_only_schema_error(obj: Any) -> None:
    # the hook and the viewer hand decode() what FrameReader accepted: an object
    # with a string type and an integer version; any other value is a SchemaError
    for kind in TYPES:
        try:
            _DECODERS[kind](obj, kind)
        except SchemaError as exc:
            assert "\n" not in str(exc) and exc.field
    if not isinstance(obj, dict):
        return
    try:
        msg = decode(obj)
    except SchemaError:
        return
    if msg is None:
        return
    # what passed the schema re-encodes as strict JSON and decodes to itself
    frame = encode_message(msg)
    again = framing.FrameReader().feed(frame)
    assert len(again) == 1 and decode(again[0]) == msg


@PROPS
@given(mutated_message())
def test_the_viewers_event_parser_never_raises(obj: Any) -> None:
    if not isinstance(obj, dict):
        return
    event = parse_event(obj)
    if isinstance(event, Invalid):
        assert "\n" not in event.error
    elif event is not None and not isinstance(event, Disconnected):
        json.dumps(event.to_wire(), allow_nan=False)


# -- frames -------------------------------------------------------------------------------
SMALL_MAX = 256


def _frame(payload: bytes, length: int | None = None) -> bytes:
    return struct.pack(">I", len(payload) if length is None else length) + payload


PAYLOADS = st.one_of(
    st.builds(lambda m: json.dumps(m).encode(), mutated_message()),
    st.binary(max_size=40),
    st.sampled_from(
        [
            b"[" * 200,  # deep nesting: json raises RecursionError, not ValueError
            b'{"v":1,"type":"ping"' + b',"a":[' * 150 + b"]" * 150 + b"}",
            b"\xff\xfe",
            b"null",
            b'{"v":"1","type":"ping"}',
            b'{"v":1,"type":7}',
            b'{"v":1,"type":"ping","x":1e400}',
            b'{"v":1,"type":"ping","x":NaN}',
        ]
    ),
)


@st.composite
def byte_stream(draw: st.DrawFn) -> tuple[bytes, list[int]]:
    """Frames (good, bad, oversized, cut), then the stream cut into chunks."""
    parts: list[bytes] = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            parts.append(draw(st.binary(max_size=12)))  # raw garbage
        elif kind == 1:
            parts.append(struct.pack(">I", draw(st.integers(SMALL_MAX + 1, 2**32 - 1))))
        else:
            payload = draw(PAYLOADS)
            parts.append(_frame(payload))
    data = b"".join(parts)
    if draw(st.integers(0, 3)) == 0:
        data = data[: draw(st.integers(0, len(data)))]
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=8)))
    return data, cuts


@PROPS
@given(byte_stream())
def test_frame_reader_gives_messages_or_frame_error(stream: tuple[bytes, list[int]]) -> None:
    data, cuts = stream
    reader = framing.FrameReader(max_frame=SMALL_MAX)
    edges = [0, *cuts, len(data)]
    got: list[dict[str, Any]] = []
    try:
        for lo, hi in itertools.pairwise(edges):
            for msg in reader.feed(data[lo:hi]):
                assert isinstance(msg, dict)
                assert isinstance(msg["type"], str) and isinstance(msg["v"], int)
                got.append(msg)
            # what is held is one incomplete frame, never more than the limit allows
            assert reader.pending < framing.HEADER_SIZE + SMALL_MAX
        reader.raise_pending()
    except framing.FrameError as exc:
        assert "\n" not in str(exc)
        # a broken stream stays broken: nothing more comes out of it
        try:
            reader.feed(b"")
        except framing.FrameError:
            pass
        else:
            raise AssertionError("a stream read past a bad frame") from None


@PROPS
@given(st.lists(mutated_message(), min_size=1, max_size=5), st.data())
def test_good_frames_come_out_whole_however_the_bytes_are_cut(
    objs: list[Any], data: st.DataObject
) -> None:
    frames = []
    expected = []
    for obj in objs:
        if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
            continue
        if isinstance(obj.get("v"), bool) or not isinstance(obj.get("v"), int):
            continue
        try:
            frames.append(framing.encode_obj(obj))
        except (ValueError, framing.FrameError):
            continue  # NaN or infinities: never sent
        expected.append(json.loads(json.dumps(obj)))
    stream = b"".join(frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    reader = framing.FrameReader()
    got: list[dict[str, Any]] = []
    for lo, hi in zip([0, *cuts], [*cuts, len(stream)], strict=False):
        got += reader.feed(stream[lo:hi])
    assert got == expected and reader.pending == 0


def test_deep_nesting_is_a_frame_error_not_a_recursion_error() -> None:
    reader = framing.FrameReader()
    deep = b"[" * 100_000
    try:
        reader.feed(_frame(deep))
    except framing.FrameError as exc:
        assert "nested" in str(exc)
    else:
        raise AssertionError("accepted")
