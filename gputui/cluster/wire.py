"""The stream of ``gputui serve --stdio`` (docs/json.md#gputui-serve---stdio).

JSON lines on standard output: one hello, then one snapshot message per
interval.  A snapshot is the monitor's whole :class:`Snapshot` in the codec's
form (``gputui.snapshot.codec``), so every field the model gains travels
without a change here.  Evolution is additive: readers ignore keys they do not
know; ``version`` is raised only for a change an older reader would misread.

Everything read here came over the network from another machine: each line is
size-capped, parsed as JSON, and every value type- and range-checked
(:func:`gputui.snapshot.codec.snapshot_from_json`); strings are kept exact and
cleaned by whatever displays them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from gputui.snapshot.codec import DecodeError, snapshot_from_json, snapshot_to_json
from gputui.snapshot.model import Snapshot

PROTOCOL = "gputui-serve"
VERSION = 1
#: a line longer than this is a protocol error (a snapshot of 8 GPUs and 100
#: processes is ~60 KB; the model's own limits allow far more than any node has)
MAX_LINE_BYTES = 16 << 20
#: at most this many hooked jobs, ranks and strings of what they say are read
MAX_JOBS = 4096
MAX_TEXT = 4096


class ProtocolError(ValueError):
    """A line that is not this protocol; the message says what was wrong."""


@dataclass(frozen=True)
class ServeHello:
    version: int
    host: str
    gputui_version: str
    interval_s: float | None
    label: str
    is_recording: bool


@dataclass(frozen=True)
class RemoteRank:
    """One hooked process of the node, as ``gputui ls`` knows it."""

    job_id: str
    pid: int
    rank: int | None
    local_rank: int | None
    world_size: int | None
    steps: int | None
    recent_step_s: float | None
    gpu: int | None
    command: tuple[str, ...]


@dataclass(frozen=True)
class ServeFrame:
    snapshot: Snapshot
    ranks: tuple[RemoteRank, ...]
    #: why the node shows no GPU (no driver, NVML failed), else None
    gpu_unavailable: str | None


# -- writing ---------------------------------------------------------------------------
def encode(message: dict[str, Any]) -> bytes:
    """One line: compact JSON, no NaN, ending in a newline."""
    return json.dumps(message, separators=(",", ":"), allow_nan=False).encode() + b"\n"


def hello_message(
    host: str, gputui_version: str, interval_s: float, label: str, is_recording: bool
) -> dict[str, Any]:
    return {
        "type": PROTOCOL,
        "version": VERSION,
        "host": host,
        "gputui_version": gputui_version,
        "interval_s": interval_s,
        "source": {"label": label, "is_recording": is_recording},
    }


def snapshot_message(
    snapshot: Snapshot, jobs: list[dict[str, Any]], gpu_unavailable: str | None
) -> dict[str, Any]:
    message: dict[str, Any] = {"type": "snapshot", "snapshot": snapshot_to_json(snapshot)}
    message["jobs"] = jobs
    if gpu_unavailable is not None:
        message["gpu_unavailable"] = gpu_unavailable
    return message


# -- reading ---------------------------------------------------------------------------
def _load(line: bytes) -> dict[str, Any]:
    if len(line) > MAX_LINE_BYTES:
        raise ProtocolError(f"a line of {len(line)} bytes (at most {MAX_LINE_BYTES})")
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError):
        raise ProtocolError("a line that is not JSON") from None
    if not isinstance(doc, dict):
        raise ProtocolError("a line that is not a JSON object")
    return doc


def _text(value: Any, default: str = "") -> str:
    return value[:MAX_TEXT] if isinstance(value, str) else default


def _int(value: Any, lo: int = 0, hi: int = 2**31 - 1) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        return None
    return value


def _float(value: Any, hi: float = 1e9) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and 0.0 <= value <= hi else None


def decode_hello(line: bytes) -> ServeHello:
    doc = _load(line)
    if doc.get("type") != PROTOCOL:
        raise ProtocolError("the first line is not a gputui serve hello")
    version = _int(doc.get("version"), 1)
    if version is None:
        raise ProtocolError("the hello has no protocol version")
    if version > VERSION:
        raise ProtocolError(
            f"the node speaks protocol version {version}; this gputui reads {VERSION} "
            "(upgrade gputui here)"
        )
    source = doc.get("source")
    source = source if isinstance(source, dict) else {}
    return ServeHello(
        version=version,
        host=_text(doc.get("host")),
        gputui_version=_text(doc.get("gputui_version")),
        interval_s=_float(doc.get("interval_s"), 3600.0),
        label=_text(source.get("label")),
        is_recording=source.get("is_recording") is True,
    )


def decode_frame(line: bytes) -> ServeFrame | None:
    """A snapshot message; None for a message of a type this gputui does not know
    (a newer node's addition)."""
    doc = _load(line)
    if doc.get("type") != "snapshot":
        if isinstance(doc.get("type"), str):
            return None
        raise ProtocolError("a message without a type")
    try:
        snapshot = snapshot_from_json(doc.get("snapshot"))
    except DecodeError as exc:
        raise ProtocolError(f"a snapshot that does not decode: {str(exc)[:200]}") from None
    reason = doc.get("gpu_unavailable")
    return ServeFrame(
        snapshot=snapshot,
        ranks=decode_ranks(doc.get("jobs")),
        gpu_unavailable=_text(reason) or "no GPU" if reason is not None else None,
    )


def decode_ranks(jobs: Any) -> tuple[RemoteRank, ...]:
    """The ranks of ``gputui ls --json``'s entries (with the ``job_id`` serve adds);
    an entry that does not fit is left out, never an error."""
    if not isinstance(jobs, list):
        return ()
    out: list[RemoteRank] = []
    for entry in jobs[:MAX_JOBS]:
        if not isinstance(entry, dict) or "error" in entry:
            continue
        job_id = _text(entry.get("job_id"))
        ranks = entry.get("ranks")
        members: list[Any] = ranks if isinstance(ranks, list) else [entry]
        for member in members[:MAX_JOBS]:
            rank = _rank(member, job_id)
            if rank is not None and len(out) < MAX_JOBS:
                out.append(rank)
    return tuple(out)


def _rank(member: Any, job_id: str) -> RemoteRank | None:
    if not isinstance(member, dict):
        return None
    pid = _int(member.get("pid"))
    if pid is None:
        return None
    device = member.get("device")
    command = member.get("command")
    return RemoteRank(
        job_id=job_id or f"pid {pid}",
        pid=pid,
        rank=_int(member.get("rank")),
        local_rank=_int(member.get("local_rank")),
        world_size=_int(member.get("world_size"), 1),
        steps=_int(member.get("steps"), 0, 2**62),
        recent_step_s=_float(member.get("recent_step_s"), 1e6),
        gpu=_int(device.get("index"), 0, 2**16) if isinstance(device, dict) else None,
        command=tuple(_text(c) for c in command[:256] if isinstance(c, str))
        if isinstance(command, list)
        else (),
    )
