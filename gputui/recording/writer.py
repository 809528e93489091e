"""Recordings written: one snapshot per line, gzip-compressed, private to the user.

A node with thousands of GPU processes has most of them idle: their lines
repeat them unchanged.  From :data:`COMPACT_FROM` processes in its first
snapshot, a recording is written compact (header schema
:data:`COMPACT_SCHEMA`): a process whose values are those of the process at
its place on the line before is written as ``{"pid": PID}``, which the reader
takes as that process again (``gputui.recording.snapshot_lines``).  Every
:data:`FULL_EVERY` snapshots a line is written whole, so that a damaged line
costs at most that many.  A gputui that predates this says the recording's
schema is newer than it reads; smaller recordings keep the schema they had.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from itertools import compress, count
from operator import eq
from pathlib import Path
from typing import Any

from gputui import __version__
from gputui.recording.io import MAX_LINE_BYTES, RecordingError, mib, open_private
from gputui.snapshot.codec import snapshot_to_json, to_json
from gputui.snapshot.model import SCHEMA_VERSION, Snapshot

RECORDING_TYPE = "gputui-recording"
#: the processes in a recording's first snapshot from which it is written compact
COMPACT_FROM = 1000
#: the header schema of a compact recording (the snapshots' own stays SCHEMA_VERSION)
COMPACT_SCHEMA = SCHEMA_VERSION + 1
#: a compact recording writes one line in this many whole
FULL_EVERY = 60


class RecordingWriter:
    """Appends snapshots to a new recording (mode 0600); flushes every few snapshots.

    The header is written with the first snapshot (whose size decides whether the
    recording is compact: the module's notes), or at :meth:`close` if none came."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        interval_s: float,
        note: str | None = None,
        hostname: str | None = None,
        compact_from: int = COMPACT_FROM,
    ) -> None:
        """``hostname``: the machine the snapshots are of (a recording re-recorded
        keeps its own); this one's by default."""
        import gzip
        import socket

        self.path = Path(path)
        raw = open_private(self.path)  # closed in close()
        self._file = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9)
        self._raw = raw
        self.count = 0
        self._compact_from = compact_from
        #: None until the header is written; then whether lines are compact
        self.compact: bool | None = None
        #: the processes of the last snapshot written, and their JSON values (a
        #: process that is the same object at the same place is not encoded again)
        self._last_processes: tuple[Any, ...] = ()
        self._last: list[dict[str, Any]] = []
        self._header = {
            "type": RECORDING_TYPE,
            "schema": SCHEMA_VERSION,
            "created_s": time.time(),
            "interval_s": interval_s,
            "hostname": socket.gethostname() if hostname is None else hostname,
            "gputui_version": __version__,
            "note": note,
        }

    def _write_header(self, compact: bool) -> None:
        self.compact = compact
        if compact:
            self._header["schema"] = COMPACT_SCHEMA
        self._write_line(self._header)

    def _write_line(self, obj: Any) -> None:
        line = (json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n").encode()
        if len(line) > MAX_LINE_BYTES:  # a line no reader takes: not written
            count = len(obj.get("processes", ())) if isinstance(obj, dict) else 0
            raise RecordingError(
                f"{self.path.name}: a snapshot of {count} processes is {mib(len(line))} "
                f"of JSON, over the {mib(MAX_LINE_BYTES)} a recording's line holds"
            )
        self._file.write(line)

    def write(self, snapshot: Snapshot) -> None:
        if self.compact is None:
            self._write_header(len(snapshot.processes) >= self._compact_from)
        doc = snapshot_to_json(dataclasses.replace(snapshot, processes=()))
        last, last_docs = self._last_processes, self._last
        procs = [
            last_docs[i] if i < len(last) and proc is last[i] else to_json(proc)
            for i, proc in enumerate(snapshot.processes)
        ]
        doc["processes"] = procs  # in its place among the keys, as the whole encodes it
        if self.compact and self.count % FULL_EVERY:
            doc["processes"] = compact_processes(procs, last_docs)
        self._write_line(doc)
        # only a line written is the next one's "line before"
        self._last_processes, self._last = snapshot.processes, procs
        self.count += 1
        if self.count % 10 == 0:
            self.flush()

    def flush(self) -> None:
        # A sync flush makes everything so far readable even if we are killed later.
        self._file.flush()  # type: ignore[call-arg]
        self._raw.flush()

    def close(self) -> None:
        try:
            if self.compact is None:
                self._write_header(False)
        finally:
            self._file.close()
            self._raw.close()


def compact_processes(
    processes: list[dict[str, Any]], last: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``processes`` (JSON values) with each one equal to the one at its place in
    ``last`` written as ``{"pid": PID}`` (the module's notes)."""
    out = list(processes)
    for i in compress(count(), map(eq, processes, last)):
        out[i] = {"pid": processes[i]["pid"]}
    return out
