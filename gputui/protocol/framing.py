"""Length-prefixed JSON frames.

A frame is a 4-byte big-endian payload length followed by that many bytes of UTF-8
JSON holding one object with ``"v"`` and ``"type"``.  Frames larger than
:data:`MAX_FRAME` are refused on both ends: the reader raises :class:`FrameError`
and the peer drops the connection, so garbage on the socket can never make either
side allocate without bound.  JSON only: nothing on the socket is ever unpickled or
evaluated.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from gputui.protocol.messages import PROTOCOL_VERSION

#: Hard limit on one frame's payload.  A capture result with 30-row tables and long
#: kernel names is ~100 KB; 4 MiB leaves room without letting a peer exhaust memory.
MAX_FRAME = 4 * 1024 * 1024

_HEADER = struct.Struct(">I")
HEADER_SIZE = _HEADER.size


class FrameError(Exception):
    """The peer sent something that is not a valid frame; drop the connection."""


def encode(msg_type: str, **fields: Any) -> bytes:
    """One frame for a message of ``msg_type`` with ``fields``."""
    payload = dict(fields)
    payload["v"] = PROTOCOL_VERSION
    payload["type"] = msg_type
    return encode_obj(payload)


def encode_obj(obj: dict[str, Any]) -> bytes:
    """One frame for an already built message object."""
    data = json.dumps(obj, separators=(",", ":"), allow_nan=False, default=_default).encode("utf-8")
    if len(data) > MAX_FRAME:
        raise FrameError(f"frame of {len(data)} bytes exceeds the {MAX_FRAME}-byte limit")
    return _HEADER.pack(len(data)) + data


def _default(obj: object) -> Any:
    # Tuples, sets and numbers from torch (e.g. a 0-d tensor slipped into a record)
    # become plain JSON instead of failing the whole batch.
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    try:
        return float(obj)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(obj)


def decode_payload(data: bytes) -> dict[str, Any]:
    """Parse one frame payload; raise :class:`FrameError` unless it is a typed object."""
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise FrameError(f"frame is not UTF-8 JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise FrameError("frame is not a JSON object")
    if not isinstance(obj.get("type"), str):
        raise FrameError("frame has no 'type'")
    if not isinstance(obj.get("v"), int):
        raise FrameError("frame has no protocol version 'v'")
    return obj


class FrameReader:
    """Incremental decoder: feed bytes as they arrive, take whole messages out.

    Used by both the hook's non-blocking selector loop and the viewer's reader
    thread.  The length is checked as soon as the 4-byte header is in, before any
    payload is buffered.
    """

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self._max = max_frame
        self._error: FrameError | None = None

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """The whole messages now in. A bad frame raises FrameError; one that
        follows good frames in the same bytes is held back until those are
        taken: the next :meth:`feed` or :meth:`raise_pending` raises it."""
        self.raise_pending()
        self._buf += data
        out: list[dict[str, Any]] = []
        try:
            while len(self._buf) >= HEADER_SIZE:
                (length,) = _HEADER.unpack_from(self._buf, 0)
                if length > self._max:
                    raise FrameError(f"frame of {length} bytes exceeds the {self._max}-byte limit")
                end = HEADER_SIZE + length
                if len(self._buf) < end:
                    break
                payload = bytes(self._buf[HEADER_SIZE:end])
                del self._buf[:end]
                out.append(decode_payload(payload))
        except FrameError as exc:
            if not out:
                raise
            self._error = exc
        return out

    def raise_pending(self) -> None:
        """Raise the bad frame held back by :meth:`feed`, if any; a stream is not
        read past a bad frame, so every later call raises it again."""
        error, self._error = self._error, None
        if error is not None:
            # the stream cannot be resynchronised after a bad frame: stay broken
            self._buf.clear()
            self._error = error
            raise error

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held so far (a truncated frame at EOF)."""
        return len(self._buf)
