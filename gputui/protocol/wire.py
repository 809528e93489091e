"""Any frame to its typed message, and typed messages to frames.

    msg = decode(obj)        # obj: a frame's JSON object (FrameReader checked v/type)
    frame = encode_message(Subscribe(history=1000))

``decode`` raises :class:`~gputui.protocol.fields.SchemaError` for a frame of a
known type that does not fit its schema, and returns None for a type this version
does not know (a newer peer's: ignored, as the protocol promises).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gputui.protocol import memsnap as ms
from gputui.protocol import messages as m
from gputui.protocol import requests as rq
from gputui.protocol.capture import CaptureResult, CaptureStatus
from gputui.protocol.framing import encode_obj
from gputui.protocol.hello import Hello, Status
from gputui.protocol.profile import GetPythonProfile, PythonProfile
from gputui.protocol.steps import MemoryBatch, StepBatch, Synced

#: what the hook sends
HookMessage = (
    Hello
    | Status
    | StepBatch
    | Synced
    | MemoryBatch
    | CaptureStatus
    | CaptureResult
    | rq.HookError
    | rq.Pong
    | rq.Bye
    | ms.MemorySnapshotStatus
    | ms.MemorySnapshotResult
    | PythonProfile
)
#: what a viewer sends
ViewerMessage = (
    rq.Subscribe
    | rq.CaptureRequest
    | rq.CaptureCancel
    | rq.Ping
    | ms.MemorySnapshotRequest
    | GetPythonProfile
)
Message = HookMessage | ViewerMessage

_DECODERS: dict[str, Callable[[Any, str], Any]] = {
    m.HELLO: Hello.from_wire,
    m.STATUS: Status.from_wire,
    m.STEPS: StepBatch.from_wire,
    m.SYNCED: Synced.from_wire,
    m.MEMORY: MemoryBatch.from_wire,
    m.CAPTURE_STATUS: CaptureStatus.from_wire,
    m.CAPTURE_RESULT: CaptureResult.from_wire,
    m.ERROR: rq.HookError.from_wire,
    m.PONG: rq.Pong.from_wire,
    m.BYE: rq.Bye.from_wire,
    m.SUBSCRIBE: rq.Subscribe.from_wire,
    m.CAPTURE: rq.CaptureRequest.from_wire,
    m.CAPTURE_CANCEL: rq.CaptureCancel.from_wire,
    m.PING: rq.Ping.from_wire,
    m.MEMSNAP: ms.MemorySnapshotRequest.from_wire,
    m.MEMSNAP_STATUS: ms.MemorySnapshotStatus.from_wire,
    m.MEMSNAP_RESULT: ms.MemorySnapshotResult.from_wire,
    m.PYTHON_PROFILE: PythonProfile.from_wire,
    m.GET_PYTHON_PROFILE: GetPythonProfile.from_wire,
}


def decode(obj: Mapping[str, Any]) -> Message | None:
    """The typed message of a frame's object; None for an unknown type."""
    kind = obj.get("type")
    if not isinstance(kind, str):
        return None
    decoder = _DECODERS.get(kind)
    if decoder is None:
        return None
    return decoder(obj, kind)  # type: ignore[no-any-return]


def encode_message(msg: Message) -> bytes:
    """One frame for a typed message."""
    return encode_obj(msg.to_wire())
