"""The typed-decode floor of a torch.profiler trace: one ``msgspec`` call that turns
the whole JSON into Structs of the fields ``gputui analyze`` reads, ``args`` kept
as raw bytes.  Nothing a reader does with the events is in it; ``bench_analyze.py``
and ``bench_decoders.py`` measure against it."""

from __future__ import annotations

import msgspec


class FloorEvent(msgspec.Struct, gc=False):
    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    ts: float | None = None
    dur: float | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    args: msgspec.Raw = msgspec.Raw()


class FloorTrace(msgspec.Struct, gc=False):
    traceEvents: list[FloorEvent]


def decode_floor(data: bytes) -> int:
    """Decode ``data`` (a whole trace) into Structs; the number of events."""
    return len(msgspec.json.decode(data, type=FloorTrace).traceEvents)
