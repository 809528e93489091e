"""Recordings: write snapshots to a file, play them back as a source.

Format: gzip-compressed JSON lines.  The first line is a header
``{"type": "gputui-recording", "schema": N, ...}``; every following line is one
snapshot (``gputui.codec.snapshot_to_json``).  A truncated tail (a recorder killed
mid-write) loses only the last partial line.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import itertools
import json
import os
import socket
import time
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any, overload

from gputui import __version__
from gputui.codec import DecodeError, snapshot_from_json, snapshot_to_json
from gputui.errors import GputuiError
from gputui.model import SCHEMA_VERSION, Snapshot

RECORDING_TYPE = "gputui-recording"
DEMO_RESOURCE = "demo.jsonl.gz"


class RecordingError(GputuiError):
    """A recording that is missing, unreadable or not a gputui recording."""


@dataclasses.dataclass(frozen=True)
class RecordingHeader:
    schema: int
    created_s: float | None
    interval_s: float | None
    hostname: str | None
    gputui_version: str | None
    note: str | None


class RecordingWriter:
    """Appends snapshots to a new recording; flushes every few snapshots."""

    def __init__(
        self, path: str | os.PathLike[str], interval_s: float, note: str | None = None
    ) -> None:
        self.path = Path(path)
        try:
            raw = open(self.path, "wb")  # closed in close()
        except OSError as exc:
            raise RecordingError(f"cannot write recording {self.path}: {exc.strerror}") from None
        self._file = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9)
        self._raw = raw
        self.count = 0
        header = {
            "type": RECORDING_TYPE,
            "schema": SCHEMA_VERSION,
            "created_s": time.time(),
            "interval_s": interval_s,
            "hostname": socket.gethostname(),
            "gputui_version": __version__,
            "note": note,
        }
        self._write_line(header)

    def _write_line(self, obj: Any) -> None:
        line = json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n"
        self._file.write(line.encode())

    def write(self, snapshot: Snapshot) -> None:
        self._write_line(snapshot_to_json(snapshot))
        self.count += 1
        if self.count % 10 == 0:
            self.flush()

    def flush(self) -> None:
        # A sync flush makes everything so far readable even if we are killed later.
        self._file.flush()  # type: ignore[call-arg]
        self._raw.flush()

    def close(self) -> None:
        self._file.close()
        self._raw.close()


def _open_text(path: Path) -> IO[str]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise RecordingError(f"recording not found: {path}") from None
    except IsADirectoryError:
        raise RecordingError(f"recording is a directory: {path}") from None
    except OSError as exc:
        raise RecordingError(f"cannot read recording {path}: {exc.strerror}") from None
    return _decode_bytes(raw, str(path))


def _decode_bytes(raw: bytes, name: str) -> IO[str]:
    if raw[:2] == b"\x1f\x8b":
        # Decompress what is there; a recorder killed mid-write leaves a stream
        # without its end marker, and everything before that is still good.
        decomp = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            data = decomp.decompress(raw)
        except zlib.error:
            raise RecordingError(f"{name}: corrupt compressed data") from None
        return io.StringIO(data.decode("utf-8", errors="replace"))
    return io.StringIO(raw.decode("utf-8", errors="replace"))


def read_recording(path: str | os.PathLike[str]) -> tuple[RecordingHeader, list[Snapshot]]:
    """Parse a whole recording; raise RecordingError with a one-line reason."""
    path = Path(path)
    return _parse(_open_text(path), str(path))


def read_demo() -> tuple[RecordingHeader, list[Snapshot]]:
    return _parse(_demo_text(), "demo recording")


def _demo_text() -> IO[str]:
    from importlib import resources

    try:
        raw = resources.files("gputui.data").joinpath(DEMO_RESOURCE).read_bytes()
    except (FileNotFoundError, OSError):
        raise RecordingError("the embedded demo recording is missing from this install") from None
    return _decode_bytes(raw, "demo recording")


class _LazySnapshots(Sequence[Snapshot]):
    """A recording's snapshots, each decoded when first played.

    Decoding every snapshot up front costs ~0.4 ms each (~90 ms for the demo), all
    of it before the first frame; played one per second, the cost disappears.
    Only for recordings known to decode (the embedded demo, checked by the tests):
    a user's file is decoded whole at open, so that a bad line is reported there.
    """

    def __init__(self, lines: list[str], name: str) -> None:
        self._lines = lines
        self._decoded: list[Snapshot | None] = [None] * len(lines)
        self._name = name

    def __len__(self) -> int:
        return len(self._lines)

    @overload
    def __getitem__(self, index: int) -> Snapshot: ...

    @overload
    def __getitem__(self, index: slice) -> list[Snapshot]: ...

    def __getitem__(self, index: int | slice) -> Snapshot | list[Snapshot]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        snapshot = self._decoded[index]
        if snapshot is None:
            try:
                snapshot = snapshot_from_json(json.loads(self._lines[index]))
            except (json.JSONDecodeError, DecodeError) as exc:
                number = (index if index >= 0 else len(self) + index) + 2
                raise RecordingError(f"{self._name}: line {number}: {exc}") from None
            self._decoded[index] = snapshot
        return snapshot


def _parse(text: IO[str], name: str) -> tuple[RecordingHeader, list[Snapshot]]:
    lines = _lines(text)
    header = _parse_header(lines, name)
    snapshots: list[Snapshot] = []
    for number, line in enumerate(lines, start=2):
        try:
            snapshots.append(snapshot_from_json(json.loads(line)))
        except json.JSONDecodeError:
            # Only a cut-off last line is forgiven.
            if next(lines, None) is None:
                break
            raise RecordingError(f"{name}: line {number} is not valid JSON") from None
        except DecodeError as exc:
            raise RecordingError(f"{name}: line {number}: {exc}") from None
    if not snapshots:
        raise RecordingError(f"{name}: the recording holds no snapshots")
    return header, snapshots


def _parse_header(lines: Iterator[str], name: str) -> RecordingHeader:
    """Read and check the header line (the first of ``lines``)."""
    first = next(lines, None)
    if first is None:
        raise RecordingError(f"{name}: empty file, not a gputui recording")
    try:
        head = json.loads(first)
    except json.JSONDecodeError:
        raise RecordingError(f"{name}: not a gputui recording") from None
    if not isinstance(head, dict) or head.get("type") != RECORDING_TYPE:
        raise RecordingError(f"{name}: not a gputui recording")
    schema = head.get("schema")
    if not isinstance(schema, int) or schema > SCHEMA_VERSION:
        raise RecordingError(
            f"{name}: recording schema {schema!r} is newer than this gputui reads "
            f"({SCHEMA_VERSION}); upgrade gputui"
        )
    return RecordingHeader(
        schema=schema,
        created_s=_num(head.get("created_s")),
        interval_s=_num(head.get("interval_s")),
        hostname=head.get("hostname") if isinstance(head.get("hostname"), str) else None,
        gputui_version=head.get("gputui_version")
        if isinstance(head.get("gputui_version"), str)
        else None,
        note=head.get("note") if isinstance(head.get("note"), str) else None,
    )


def _lines(text: IO[str]) -> Iterator[str]:
    for line in text:
        if line.strip():
            yield line


def _num(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


class ReplaySource:
    """Plays a recording in a loop, at the recording's cadence divided by ``speed``.

    Snapshots keep their recorded timestamps (so process run times stay true);
    a view that plots history should order by arrival, since time jumps back
    when the recording loops.  ``loops`` counts completed passes.
    """

    is_recording = True

    def __init__(
        self,
        header: RecordingHeader,
        snapshots: Sequence[Snapshot],
        label: str,
        speed: float = 1.0,
    ) -> None:
        if not snapshots:
            raise RecordingError("the recording holds no snapshots")
        self.header = header
        self.snapshots = snapshots
        self.label = label
        self.speed = speed
        self.position = 0
        self.loops = 0
        interval = header.interval_s or _median_gap(snapshots) or 1.0
        self.natural_interval_s: float | None = max(0.1, interval / speed)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], speed: float = 1.0) -> ReplaySource:
        header, snapshots = read_recording(path)
        return cls(header, snapshots, f"recording: {Path(path).name}", speed)

    @classmethod
    def demo(cls, speed: float = 1.0) -> ReplaySource:
        # Decoded as played: the demo's first frame does not wait for all of it.
        name = "demo recording"
        lines = _lines(_demo_text())
        header = _parse_header(lines, name)
        snapshots = _LazySnapshots(list(lines), name)
        where = f" of {header.note}" if header.note else ""
        return cls(header, snapshots, f"DEMO: recording{where}", speed)

    def sample(self) -> Snapshot:
        snapshot = self.snapshots[self.position]
        self.position += 1
        if self.position == len(self.snapshots):
            self.position = 0
            self.loops += 1
        return snapshot

    def close(self) -> None:
        pass


def _median_gap(snapshots: Sequence[Snapshot]) -> float | None:
    gaps = sorted(
        b.timestamp_s - a.timestamp_s
        for a, b in itertools.pairwise(snapshots)
        if b.timestamp_s > a.timestamp_s
    )
    return gaps[len(gaps) // 2] if gaps else None
