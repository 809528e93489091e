"""Recordings of attach sessions: every message a hook sent, with its arrival time.

Format: gzip-compressed JSON lines.  Line 1 is a header
``{"type": "gputui-attach-recording", "version": 1, "created_s", "pid", "note"}``;
line 2 the hook's hello; then ``{"t": seconds_since_start, "msg": {...}}`` per
message.  Replaying feeds the same messages through ``hook_client.parse_event``,
so the attach screen sees exactly what it saw live.
"""

from __future__ import annotations

import gzip
import json
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gputui.collectors.replay import RecordingError, _decode_bytes

ATTACH_RECORDING_TYPE = "gputui-attach-recording"
VERSION = 1


@dataclass(frozen=True)
class AttachRecording:
    pid: int | None
    note: str | None
    created_s: float | None
    hello: dict[str, Any]
    #: (seconds since the recording started, message)
    messages: list[tuple[float, dict[str, Any]]]


class AttachRecorder:
    """Writes a session's messages; safe to call ``write`` from a reader thread."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        hello: Mapping[str, Any],
        pid: int,
        note: str | None = None,
    ) -> None:
        try:
            raw = open(path, "wb")  # closed in close()
        except OSError as exc:
            raise RecordingError(f"cannot write recording {path}: {exc.strerror}") from None
        self._raw = raw
        self._file = gzip.GzipFile(fileobj=raw, mode="wb")
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self.count = 0
        header = {
            "type": ATTACH_RECORDING_TYPE,
            "version": VERSION,
            "created_s": time.time(),
            "pid": pid,
            "note": note,
        }
        self._line(header)
        self._line(dict(hello))

    def _line(self, obj: Any) -> None:
        self._file.write((json.dumps(obj, separators=(",", ":")) + "\n").encode())

    def write(self, msg: Mapping[str, Any]) -> None:
        with self._lock:
            if self._file.closed:
                return
            self._line({"t": round(time.monotonic() - self._start, 4), "msg": dict(msg)})
            self.count += 1

    def close(self) -> None:
        with self._lock:
            self._file.close()
            self._raw.close()


def read_attach_recording(path: str | os.PathLike[str]) -> AttachRecording:
    """Parse a whole attach recording; RecordingError with one line if it is not one."""
    name = str(path)
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise RecordingError(f"recording not found: {name}") from None
    except OSError as exc:
        raise RecordingError(f"cannot read recording {name}: {exc.strerror}") from None
    lines = [line for line in _decode_bytes(raw, name) if line.strip()]
    try:
        header = json.loads(lines[0]) if lines else None
    except json.JSONDecodeError:
        header = None
    if not isinstance(header, dict) or header.get("type") != ATTACH_RECORDING_TYPE:
        raise RecordingError(f"{name}: not a gputui attach recording")
    if not isinstance(header.get("version"), int) or header["version"] > VERSION:
        raise RecordingError(f"{name}: attach recording version is newer than this gputui")
    try:
        hello = json.loads(lines[1])
    except (IndexError, json.JSONDecodeError):
        raise RecordingError(f"{name}: the recording has no hello message") from None
    messages: list[tuple[float, dict[str, Any]]] = []
    for number, line in enumerate(lines[2:], start=3):
        try:
            item = json.loads(line)
            messages.append((float(item["t"]), dict(item["msg"])))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            if number == len(lines):
                break  # a cut-off last line
            raise RecordingError(f"{name}: line {number} is not a recorded message") from None
    pid = header.get("pid")
    return AttachRecording(
        pid=pid if isinstance(pid, int) else None,
        note=header.get("note") if isinstance(header.get("note"), str) else None,
        created_s=header.get("created_s") if isinstance(header.get("created_s"), float) else None,
        hello=hello if isinstance(hello, dict) else {},
        messages=messages,
    )
