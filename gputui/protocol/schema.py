"""Typed messages between the hook and its viewers (standard library only).

Each message is a frozen dataclass whose fields declare their wire form
(:mod:`gputui.protocol.spec`), compiled into ``from_wire(obj)`` (checks every
field's type and range and raises :class:`SchemaError` naming the field) and
``to_wire()`` (the JSON object, with ``v`` and ``type``).  :func:`decode` turns
any received frame into its message.  The hook, the viewer's client, the attach
screen, ``attach --once``, the recorder and the exporter all use these classes,
so the shape of a message is written down once.

Wire keys are kept as the first protocol version sent them (recordings of that
version still replay); Python names add units where the wire is terse.  This
module gathers them all; they are defined by kind in ``hello`` (hello, status),
``steps`` (steps, memory), ``capture`` (capture progress and result),
``memsnap`` (memory snapshots), ``profile`` (the Python stack sampler's
profile) and ``requests`` (the viewer's requests and the
hook's small replies).
"""

from __future__ import annotations

from gputui.protocol.capture import (
    CaptureOptions,
    CaptureResult,
    CaptureStatus,
    CpuOpRow,
    GpuTime,
    KernelRow,
)
from gputui.protocol.fields import SchemaError
from gputui.protocol.hello import (
    CaptureInfo,
    CommInfo,
    DeviceInfo,
    GpuTiming,
    Hello,
    LoaderInfo,
    Status,
)
from gputui.protocol.memsnap import (
    MemorySnapshotRequest,
    MemorySnapshotResult,
    MemorySnapshotStatus,
)
from gputui.protocol.messages import StepFlag
from gputui.protocol.profile import (
    GetPythonProfile,
    PathFrame,
    ProfileFunction,
    ProfileLine,
    PythonProfile,
    SamplerInfo,
)
from gputui.protocol.requests import (
    Bye,
    CaptureCancel,
    CaptureRequest,
    HookError,
    Ping,
    Pong,
    Subscribe,
)
from gputui.protocol.steps import MemoryBatch, MemorySample, StepBatch, StepRecord, Synced

__all__ = [
    "Bye",
    "CaptureCancel",
    "CaptureInfo",
    "CaptureOptions",
    "CaptureRequest",
    "CaptureResult",
    "CaptureStatus",
    "CommInfo",
    "CpuOpRow",
    "DeviceInfo",
    "GetPythonProfile",
    "GpuTime",
    "GpuTiming",
    "Hello",
    "HookError",
    "KernelRow",
    "LoaderInfo",
    "MemoryBatch",
    "MemorySample",
    "MemorySnapshotRequest",
    "MemorySnapshotResult",
    "MemorySnapshotStatus",
    "PathFrame",
    "Ping",
    "Pong",
    "ProfileFunction",
    "ProfileLine",
    "PythonProfile",
    "SamplerInfo",
    "SchemaError",
    "Status",
    "StepBatch",
    "StepFlag",
    "StepRecord",
    "Subscribe",
    "Synced",
]
