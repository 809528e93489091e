"""Recordings of attach sessions: every message a hook sent, with its arrival time.

Format: gzip-compressed JSON lines.  Line 1 is a header
``{"type": "gputui-attach-recording", "version": 1, "created_s", "pid", "note"}``;
line 2 the hook's hello; then ``{"t": seconds_since_start, "msg": {...}}`` per
message.  Replaying feeds the same messages through ``gputui.client.hook.parse_event``,
so the attach screen sees exactly what it saw live.  Recordings are written
0600 and read as a bounded stream (``gputui.recording.io``).

A session with several ranks of one job is version 2: the header adds
``"ranks": [pid, ...]`` (one stream per connection, in that order), line 2 is
stream 0's hello, and a message line of another stream carries ``"s": k``; the
first message of stream k is its hello.  Version 1 files read as before.

The hook's Python profile (``python_profile``, about every 2 s, each covering
the last 30 to 60 s) is kept once per ``PROFILE_EVERY_S`` a stream, and the
newest one left out is written when the recording closes: an hour of a job
stays well inside ``MAX_ATTACH_BYTES``.
"""

from __future__ import annotations

import gzip
import json
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gputui.fmt import clean
from gputui.protocol.messages import PYTHON_PROFILE
from gputui.recording.io import (
    LineReader,
    RecordingError,
    ends_early,
    load_message_line,
    open_private,
    open_regular,
    reader_for_bytes,
)
from gputui.snapshot.codec import DecodeError, from_json, to_json
from gputui.snapshot.model import UNIX_TIME_MAX_S, DeviceSnapshot

ATTACH_RECORDING_TYPE = "gputui-attach-recording"
#: the newest version this gputui reads and writes (2: several ranks' streams)
VERSION = 2
#: what a one-connection session is written as (readable by older gputui)
SINGLE_VERSION = 1
#: the most streams (ranks) one recording may hold
MAX_STREAMS = 1024
#: a message of the recording's own: the job's GPU as the viewer sampled it
GPU_SAMPLE = "gpu_sample"
#: the most an attach recording may hold, decompressed: about two hours of a busy
#: training job (its messages are kept in memory, about six times this)
MAX_ATTACH_BYTES = 64 * 2**20
#: the longest session a recording's times may describe (a year, in seconds)
MAX_SESSION_S = 366 * 86400.0
MAX_PID = 2**31 - 1
#: a stream's Python profiles are kept this often at most
PROFILE_EVERY_S = 15.0


@dataclass(frozen=True)
class AttachRecording:
    pid: int | None
    note: str | None
    created_s: float | None
    hello: dict[str, Any]
    #: (seconds since the recording started, message)
    messages: list[tuple[float, dict[str, Any]]]
    #: a multi-rank session: every stream as a recording of its own (stream 0,
    #: which the fields above describe, first); () for one connection
    ranks: tuple[AttachRecording, ...] = ()
    #: the file ends early (cut off, or still being written): what to say of it
    ends_early: str | None = None


class AttachRecorder:
    """Writes a session's messages; safe to call ``write`` from a reader thread."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        hello: Mapping[str, Any],
        pid: int,
        note: str | None = None,
        ranks: list[int] | None = None,
    ) -> None:
        """``ranks``: the pids of a multi-rank session's streams, stream 0 (whose
        hello this is) first; their hellos are written with ``write(msg, k)``."""
        # 0600: the messages hold command lines and captures
        raw = open_private(path)  # closed in close()
        self._raw = raw
        self._file = gzip.GzipFile(fileobj=raw, mode="wb")
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self.count = 0
        #: per stream: when its last profile was written, and the newest one held back
        self._profile_at: dict[int, float] = {}
        self._held: dict[int, dict[str, Any]] = {}
        header: dict[str, Any] = {
            "type": ATTACH_RECORDING_TYPE,
            "version": SINGLE_VERSION if ranks is None else VERSION,
            "created_s": time.time(),
            "pid": pid,
            "note": note,
        }
        if ranks is not None:
            header["ranks"] = list(ranks)
        self._line(header)
        self._line(dict(hello))

    def _line(self, obj: Any) -> None:
        self._file.write((json.dumps(obj, separators=(",", ":")) + "\n").encode())

    def write(self, msg: Mapping[str, Any], stream: int = 0) -> None:
        now = time.monotonic()
        line: dict[str, Any] = {"t": round(now - self._start, 4), "msg": dict(msg)}
        if stream:
            line["s"] = stream
        with self._lock:
            if self._file.closed:
                return
            if msg.get("type") == PYTHON_PROFILE:
                last = self._profile_at.get(stream)
                if last is not None and now - last < PROFILE_EVERY_S:
                    self._held[stream] = line["msg"]
                    return
                self._profile_at[stream] = now
                self._held.pop(stream, None)
            self._line(line)
            self.count += 1

    def write_gpu(self, device: DeviceSnapshot, stream: int = 0) -> None:
        """One sample of the job's GPU, as the viewer saw it (a message of the
        recording's own, type ``gpu_sample``: hooks never send it)."""
        self.write({"v": 1, "type": GPU_SAMPLE, "device": to_json(device)}, stream)

    def close(self) -> None:
        with self._lock:
            held, self._held = self._held, {}
        for stream, msg in sorted(held.items()):
            self._profile_at.pop(stream, None)
            self.write(msg, stream)
        with self._lock:
            self._file.close()
            self._raw.close()


def read_attach_recording(path: str | os.PathLike[str]) -> AttachRecording:
    """Read an attach recording; RecordingError with one line if it is not one.

    Streamed with bounds (``recording_io``): a regular file only, lines of at most
    ``MAX_LINE_BYTES``, at most ``MAX_ATTACH_BYTES`` decompressed (the messages
    are kept in memory, about six times that).  Numbers that no message holds
    (NaN, infinities, integers of more than 24 digits) read as null.
    """
    name = clean(os.fspath(path))
    with LineReader(open_regular(path), name, MAX_ATTACH_BYTES) as reader:
        return _parse(reader)


def read_attach_bytes(data: bytes, name: str) -> AttachRecording:
    """The same from bytes in memory (an embedded demo)."""
    with reader_for_bytes(data, name, MAX_ATTACH_BYTES) as reader:
        return _parse(reader)


def _parse(reader: LineReader) -> AttachRecording:
    name = reader.name
    lines = iter(reader)
    first = next(lines, None)
    try:
        header = load_message_line(first[1]) if first else None
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("type") != ATTACH_RECORDING_TYPE:
        if isinstance(header, dict) and header.get("type") == "gputui-recording":
            raise RecordingError(f"{name}: a monitor recording: play it with 'gputui --replay'")
        raise RecordingError(f"{name}: not a gputui attach recording")
    version = header.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise RecordingError(f"{name}: attach recording version {_short(version)} is not valid")
    if version > VERSION:
        raise RecordingError(
            f"{name}: attach recording version {version} is newer than this gputui reads "
            f"({VERSION}); upgrade gputui"
        )
    second = next(lines, None)
    try:
        hello = load_message_line(second[1]) if second else None
    except ValueError:
        hello = None
    if not isinstance(hello, dict) or hello.get("type") != "hello":
        raise RecordingError(f"{name}: the recording has no hello message")
    pids = _stream_pids(header, name) if version >= 2 else None
    streams: list[list[tuple[float, dict[str, Any]]]] = [[] for _ in pids or [0]]
    read = 0
    for number, line in lines:
        try:
            item = load_message_line(line)
        except ValueError:
            item = None
        message = _message(item)
        stream = _stream(item, len(streams))
        if message is None or stream is None:
            if not reader.complete:
                break  # a cut-off last line
            raise RecordingError(f"{name}: line {number} is not a recorded message")
        streams[stream].append(message)
        read += 1
    cut = ends_early(name, read, "message") if reader.cut_short else None
    pid = header.get("pid")
    note = header.get("note")
    created = _in_range(header.get("created_s"), 0.0, UNIX_TIME_MAX_S)
    note = note if isinstance(note, str) and len(note) <= 4096 else None
    main = AttachRecording(
        pid=pid if isinstance(pid, int) and _in_range(pid, 1, MAX_PID) is not None else None,
        note=note,
        created_s=created,
        hello=hello,
        messages=streams[0],
        ends_early=cut,
    )
    if pids is None:
        return main
    ranks = [main]
    for k in range(1, len(streams)):
        # A stream's hello is its first message; one never connected has none.
        messages = streams[k]
        start = next((i for i, (_t, m) in enumerate(messages) if m.get("type") == "hello"), None)
        if start is None:
            continue
        ranks.append(
            AttachRecording(pids[k], note, created, messages[start][1], messages[start + 1 :])
        )
    return AttachRecording(main.pid, note, created, hello, streams[0], tuple(ranks), cut)


def _stream_pids(header: Mapping[str, Any], name: str) -> list[int]:
    """A version-2 header's stream pids."""
    pids = header.get("ranks")
    if (
        not isinstance(pids, list)
        or not 1 <= len(pids) <= MAX_STREAMS
        or not all(isinstance(p, int) and not isinstance(p, bool) for p in pids)
        or not all(1 <= p <= MAX_PID for p in pids)
    ):
        raise RecordingError(f"{name}: the header's ranks are not a list of pids")
    return list(pids)


def _stream(item: Any, streams: int) -> int | None:
    """The stream a message line belongs to (``"s"``, 0 when absent), or None
    when it names no stream of the recording."""
    if not isinstance(item, dict):
        return None
    stream = item.get("s", 0)
    if isinstance(stream, bool) or not isinstance(stream, int) or not 0 <= stream < streams:
        return None
    return stream


def gpu_sample(msg: Mapping[str, Any]) -> DeviceSnapshot | None:
    """The GPU sample a ``gpu_sample`` message carries; None for any other
    message or a damaged one (skipped, like any damaged line)."""
    if msg.get("type") != GPU_SAMPLE:
        return None
    try:
        return from_json(DeviceSnapshot, msg.get("device"))
    except (DecodeError, TypeError, ValueError, RecursionError):
        return None


def _message(item: Any) -> tuple[float, dict[str, Any]] | None:
    """``{"t": seconds, "msg": {...}}`` as (t, msg), or None if it is not one."""
    if not isinstance(item, dict):
        return None
    t, msg = _in_range(item.get("t"), 0.0, MAX_SESSION_S), item.get("msg")
    if t is None or not isinstance(msg, dict):
        return None
    return t, msg


def _in_range(value: Any, lo: float, hi: float) -> float | None:
    """``value`` as a float if it is a number from ``lo`` to ``hi``, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if lo <= value <= hi else None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
