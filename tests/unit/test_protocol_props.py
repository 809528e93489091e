"""Property tests of the wire: whatever bytes or values a peer sends, frame
decoding raises only FrameError, schema validation only SchemaError, and the
viewer's event parser nothing at all; what decodes is in range and re-encodes
as strict JSON."""

from __future__ import annotations

import itertools
import json
import os
import struct
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gputui.client.hook import Disconnected, Invalid, parse_event
from gputui.protocol import framing
from gputui.protocol.fields import SchemaError
from gputui.protocol.wire import _DECODERS, decode, encode_message
from tests.helpers.wire_strategies import REAL, TYPES, mutated_message

EXAMPLES = int(os.environ.get("GPUTUI_PROPERTY_EXAMPLES", "120"))
PROPS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


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
