"""Recordings: write snapshots to a file, play them back as a source.

Format: gzip-compressed JSON lines.  The first line is a header
``{"type": "gputui-recording", "schema": N, ...}``; every following line is one
snapshot (``gputui.snapshot.codec.snapshot_to_json``).  A truncated tail (a recorder killed
mid-write) loses only the last partial line.

Writing, and compact recordings: ``gputui.recording.writer``.

A recording is read as a stream (``gputui.recording.io``): opening
one reads its header and first snapshot only, so ``--once`` and the monitor's
first frame cost the same for a minute or a day of data.  The replay decodes
each snapshot as it plays it, goes back to the start at the end, and counts
the snapshots on a thread of its own for the progress it shows.  A recording
of at most ``PRELOAD_MAX_BYTES`` (and ``PRELOAD_MAX_PROCESSES`` processes in
all its snapshots) is then decoded whole on that thread, once:
from there on it plays from memory, every pass, without decoding again.
"""

from __future__ import annotations

import os
import threading
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gputui.fmt import clean
from gputui.protocol.value import ValueBase, value_class
from gputui.recording.io import (
    MAX_TOTAL_BYTES,
    LineReader,
    RecordingError,
    embedded_bytes,
    ends_early,
    load_line,
    open_regular,
    reader_for_bytes,
)
from gputui.recording.snapshot_lines import SnapshotLines
from gputui.recording.writer import COMPACT_SCHEMA, RECORDING_TYPE, RecordingWriter
from gputui.snapshot.codec import DecodeError, check_schema
from gputui.snapshot.model import UNIX_TIME_MAX_S, Snapshot

if TYPE_CHECKING:
    from gputui.host.in_view import InView

__all__ = [
    "DEMO_RESOURCE",
    "RECORDING_TYPE",
    "RecordingError",
    "RecordingHeader",
    "RecordingWriter",
    "ReplayProgress",
    "ReplaySource",
    "read_demo",
    "read_recording",
]

DEMO_RESOURCE = "demo.jsonl.gz"
#: the embedded recordings ``gputui --demo NAME`` plays, by name (the first: --demo)
DEMO_RESOURCES = {"h100": DEMO_RESOURCE, "ddp": "demo_ddp.jsonl.gz"}
#: what ``read_recording`` (a whole recording in memory) reads at most, decompressed
MAX_WHOLE_BYTES = 256 * 2**20
#: a recording's cadence outside (0, this] is not believed (the replay's own pace)
MAX_INTERVAL_S = 3600.0
#: the monitor's replay starts counting the snapshots this long after its first one
COUNT_DELAY_S = 1.0
#: a finished recording whose lines come to at most this many bytes (decompressed)
#: is decoded whole after it is counted, and plays from memory (about 10 minutes of
#: 8 GPUs with 40 processes at 1 s, or hours of a smaller machine)
PRELOAD_MAX_BYTES = 24 * 2**20
#: ...and whose snapshots hold at most this many processes in all (a compact
#: recording's lines are small for the processes they hold: each snapshot in
#: memory holds every one of them)
PRELOAD_MAX_PROCESSES = 60_000


@value_class
class RecordingHeader(ValueBase):
    """A recording's first line: its schema, when and where it was made, its note."""

    schema: int
    created_s: float | None
    interval_s: float | None
    hostname: str | None
    gputui_version: str | None
    note: str | None


@value_class
class ReplayProgress(ValueBase):
    """Where a replay is: the snapshot shown (1-based) of ``total`` (None while
    still counting), and how many times it went back to the start.  ``ends_early``:
    the file ends early (cut off, or still being written), after this many
    snapshots."""

    position: int
    total: int | None
    loops: int
    ends_early: int | None = None


# -- reading ---------------------------------------------------------------------------


def _file_opener(path: str | os.PathLike[str]) -> Callable[[int], LineReader]:
    name = clean(os.fspath(path))

    def open_reader(max_total: int) -> LineReader:
        return LineReader(open_regular(path), name, max_total)

    return open_reader


def _demo_opener(name: str = "h100") -> Callable[[int], LineReader]:
    try:
        raw = embedded_bytes(DEMO_RESOURCES[name])
    except (FileNotFoundError, OSError):
        raise RecordingError("the embedded demo recording is missing from this install") from None
    return lambda max_total: reader_for_bytes(raw, "demo recording", max_total)


def _parse_header(lines: Iterator[tuple[int, bytes]], name: str) -> RecordingHeader:
    """Read and check the header line (the first of ``lines``)."""
    first = next(lines, None)
    if first is None:
        raise RecordingError(f"{name}: empty file, not a gputui recording")
    try:
        head = load_line(first[1])
    except ValueError:
        raise RecordingError(f"{name}: not a gputui recording") from None
    if not isinstance(head, dict) or head.get("type") != RECORDING_TYPE:
        if isinstance(head, dict) and head.get("type") == "gputui-attach-recording":
            raise RecordingError(
                f"{name}: an attach session recording: play it with 'gputui attach --replay'"
            )
        raise RecordingError(f"{name}: not a gputui recording")
    try:
        schema = check_schema(head.get("schema"), "recording", COMPACT_SCHEMA)
    except DecodeError as exc:
        upgrade = "; upgrade gputui" if "newer" in str(exc) else ""
        raise RecordingError(f"{name}: {exc}{upgrade}") from None
    return RecordingHeader(
        schema=schema,
        created_s=_num(head.get("created_s"), 0.0, UNIX_TIME_MAX_S),
        interval_s=_num(head.get("interval_s"), 0.0, MAX_INTERVAL_S, open_low=True),
        hostname=_text(head.get("hostname")),
        gputui_version=_text(head.get("gputui_version")),
        note=_text(head.get("note")),
    )


class _FirstLine:
    """The first snapshot of a compact recording's pass, and a checksum of its
    line: the next pass takes it again when its first line is the same, without
    decoding it (20,000 processes: 0.3 s, every pass of a recording that loops)."""

    def __init__(self) -> None:
        self.check: tuple[int, int, int] | None = None
        self.snapshot: Snapshot | None = None


def _line_check(line: bytes) -> tuple[int, int, int]:
    return len(line), zlib.crc32(line), zlib.adler32(line)


def _snapshots(
    reader: LineReader,
    lines: Iterator[tuple[int, bytes]],
    decoder: SnapshotLines | None = None,
    first: _FirstLine | None = None,
) -> Iterator[Snapshot | RecordingError]:
    """The snapshots of ``lines`` (a reader's lines after the header), decoded.

    A line that is not a snapshot comes out as a RecordingError (not raised: the
    caller decides, and the next line follows); an error of the stream itself
    (corrupt, over a bound) comes out last.  Only a last line cut off by the end
    of the file is forgiven (a recorder killed mid-write).
    """
    decoder = decoder or SnapshotLines()
    try:
        for number, line in lines:
            try:
                if first is None:
                    yield decoder.decode(line)
                    continue
                check = _line_check(line)
                if first.snapshot is not None and first.check == check:
                    decoder.assume(first.snapshot)
                    snapshot = first.snapshot
                else:
                    snapshot = decoder.decode(line)
                    first.check, first.snapshot = check, snapshot
                first = None
                yield snapshot
            except DecodeError as exc:
                first = None
                if not reader.complete:
                    return
                yield RecordingError(f"{reader.name}: line {number}: {exc}")
            except ValueError as exc:  # not JSON: JSONDecodeError, UnicodeDecodeError, ...
                first = None
                if not reader.complete:
                    return
                reason = str(exc).split(":")[0]
                yield RecordingError(f"{reader.name}: line {number} is not valid JSON ({reason})")
    except RecordingError as exc:
        yield exc


def _read_whole(
    opener: Callable[[int], LineReader], max_total: int
) -> tuple[RecordingHeader, list[Snapshot]]:
    with opener(max_total) as reader:
        lines = iter(reader)
        header = _parse_header(lines, reader.name)
        snapshots: list[Snapshot] = []
        for item in _snapshots(reader, lines):
            if isinstance(item, RecordingError):
                raise item
            snapshots.append(item)
        if not snapshots:
            raise RecordingError(f"{reader.name}: the recording holds no snapshots")
    return header, snapshots


def read_recording(
    path: str | os.PathLike[str], max_total: int = MAX_WHOLE_BYTES
) -> tuple[RecordingHeader, list[Snapshot]]:
    """A whole recording in memory (at most ``max_total`` bytes decompressed);
    RecordingError with a one-line reason.  The replay streams instead."""
    return _read_whole(_file_opener(path), max_total)


def read_demo() -> tuple[RecordingHeader, list[Snapshot]]:
    return _read_whole(_demo_opener(), MAX_WHOLE_BYTES)


def _num(value: Any, lo: float, hi: float, open_low: bool = False) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not lo <= value <= hi or (open_low and value == lo):
        return None
    return float(value)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and len(value) <= 4096 else None


# -- playing ---------------------------------------------------------------------------


class _ListPlayer:
    """Snapshots already in memory (tests, synthetic data)."""

    def __init__(self, snapshots: Sequence[Snapshot]) -> None:
        self.snapshots = snapshots
        self.total: int | None = len(snapshots)
        self.ends_early: int | None = None
        self._index = 0

    def next_in_pass(self) -> Snapshot | None:
        if self._index >= len(self.snapshots):
            return None
        self._index += 1
        return self.snapshots[self._index - 1]

    def restart(self) -> None:
        self._index = 0

    def start_counting(self, delay_s: float = 0.0) -> None:
        pass

    def close(self) -> None:
        pass


class _StreamPlayer:
    """A recording read as it plays: one decompressed chunk and one line in memory.

    Opening reads the header and the first snapshot (errors there are the file's
    errors: one line, exit 2).  Each pass reopens the file.  ``start_counting``
    counts the snapshots on a daemon thread (the progress's total); then, for a
    recording of at most ``preload_max`` bytes in which every line decodes, the
    same thread decodes them all and the passes play from that list.
    """

    def __init__(
        self,
        opener: Callable[[int], LineReader],
        max_total: int,
        preload_max: int = PRELOAD_MAX_BYTES,
        preload_max_processes: int = PRELOAD_MAX_PROCESSES,
    ) -> None:
        self._opener = opener
        self._max_total = max_total
        self._preload_max = preload_max
        self._preload_max_processes = preload_max_processes
        self.total: int | None = None
        #: the file ends early (cut off, or still being written), after this many
        #: snapshots: said by the count, then by each pass that reaches the end
        self.ends_early: int | None = None
        self.count_error: str | None = None
        self._closed = threading.Event()
        self._counted = threading.Event()
        self._counter: threading.Thread | None = None
        #: every snapshot of the recording, once decoded (published whole, once)
        self.preloaded: tuple[Snapshot, ...] | None = None
        #: the items this pass has played (where it is in ``preloaded``)
        self._played = 0
        self._reader: LineReader | None = None
        self._name = "recording"
        #: one decoder for every pass: the first line of a pass finds the processes
        #: of the last line of the one before
        self._decoder = SnapshotLines()
        #: the first snapshot of the last pass, taken again by the next
        self._first_line = _FirstLine()
        self._iter: Iterator[Snapshot | RecordingError] = iter(())
        #: read ahead: the first snapshot (opening checks it), perhaps the second
        self._pending: deque[Snapshot | RecordingError] = deque()
        self.header = self._open_pass()
        first = next(self._iter, None)
        if not isinstance(first, Snapshot):
            name = self.name
            self.close()
            if isinstance(first, RecordingError):
                raise first
            raise RecordingError(f"{name}: the recording holds no snapshots")
        self._pending.append(first)

    def _open_pass(self) -> RecordingHeader:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self._iter = iter(())
        reader = self._opener(self._max_total)
        try:
            lines = iter(reader)
            header = _parse_header(lines, reader.name)
        except BaseException:
            reader.close()
            raise
        self._reader = reader
        self._name = reader.name
        # A compact recording's second line stands on the first's processes: a
        # pass that takes the first snapshot again decodes little of the second.
        # (Without the first line's texts, a whole second line would be decoded
        # whole: no gain for the snapshot held.)
        first = self._first_line if header.schema >= COMPACT_SCHEMA else None
        self._iter = _snapshots(reader, lines, self._decoder, first)
        return header

    @property
    def name(self) -> str:
        return self._name

    @property
    def first(self) -> Snapshot | None:
        item = self._pending[0] if self._pending else None
        return item if isinstance(item, Snapshot) else None

    def peek_second(self) -> Snapshot | None:
        """The second snapshot, read ahead (a cadence when the header has none)."""
        if len(self._pending) == 1:
            second = next(self._iter, None)
            if second is not None:
                self._pending.append(second)
        item = self._pending[1] if len(self._pending) > 1 else None
        return item if isinstance(item, Snapshot) else None

    def next_in_pass(self) -> Snapshot | None:
        preloaded = self.preloaded
        if self._pending:
            item: Snapshot | RecordingError | None = self._pending.popleft()
        elif preloaded is not None:
            self._stop_streaming()
            item = preloaded[self._played] if self._played < len(preloaded) else None
        else:
            item = next(self._iter, None)
            if item is None and self._reader is not None:
                self.ends_early = self._played if self._reader.cut_short else None
        if item is None:
            return None
        self._played += 1
        if isinstance(item, RecordingError):
            raise item
        return item

    def restart(self) -> None:
        self._pending.clear()
        self._played = 0
        if self.preloaded is None:
            self._open_pass()
        else:
            self._stop_streaming()

    def _stop_streaming(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
            self._iter = iter(())

    def start_counting(self, delay_s: float = 0.0) -> None:
        if self._counter is None:
            self._counter = threading.Thread(
                target=self._count, args=(delay_s,), name="gputui-replay-count", daemon=True
            )
            self._counter.start()

    def wait_counted(self, timeout_s: float) -> None:
        self._counted.wait(timeout_s)

    def join(self, timeout_s: float) -> None:
        """Wait for the counting thread to end (counting, and preloading)."""
        if self._counter is not None:
            self._counter.join(timeout_s)

    def _count(self, delay_s: float) -> None:
        try:
            size = self._count_lines(delay_s)
        finally:
            self._counted.set()
        if size is not None and size <= self._preload_max:
            self._preload()

    def _count_lines(self, delay_s: float) -> int | None:
        """Count the lines (the total); their size in bytes, or None: stopped, failed,
        or a recording still being written (each pass reopens it: new lines play)."""
        # Lines, not decoded snapshots: decompressing is most of it, and the zlib
        # module releases the GIL while it inflates.  The delay keeps it off the
        # monitor's first frame (a pause, interrupted by close: no synchronisation).
        if delay_s > 0 and self._closed.wait(delay_s):
            return None
        lines = 0
        try:
            with self._opener(self._max_total) as reader:
                for _ in reader:
                    lines += 1
                    if self._closed.is_set():
                        return None
                size = reader.total if reader.ended else None
                # the lines after the header, less a last one cut off
                whole = max(0, lines - 1 - (not reader.complete))
                if reader.cut_short and self.ends_early is None:
                    self.ends_early = whole
        except RecordingError as exc:
            self.count_error = str(exc)
            return None
        if self.total is None:
            self.total = whole
        return size

    def _preload(self) -> None:
        """Decode every snapshot; publish them only if every line decoded (else the
        passes go on streaming, and each bad line is said as it plays)."""
        snapshots: list[Snapshot] = []
        held = 0
        try:
            with self._opener(self._max_total) as reader:
                lines = iter(reader)
                _parse_header(lines, reader.name)
                for item in _snapshots(reader, lines):
                    if isinstance(item, RecordingError) or self._closed.is_set():
                        return
                    held += len(item.processes)
                    if held > self._preload_max_processes:
                        return  # too many to hold: the passes go on streaming
                    snapshots.append(item)
        except RecordingError:
            return
        if snapshots:
            self.total = len(snapshots)
            self.preloaded = tuple(snapshots)

    def close(self) -> None:
        self._closed.set()
        if self._reader is not None:
            self._reader.close()


class ReplaySource:
    """Plays a recording in a loop, at the recording's cadence divided by ``speed``.

    Snapshots keep their recorded timestamps (so process run times stay true);
    a view that plots history should order by arrival, since time jumps back
    when the recording loops.  ``loops`` counts the returns to the start: the
    snapshot that ``sample`` returns right after ``loops`` grew is the first one.

    It is a :class:`gputui.sources.base.SnapshotSource` (a room above this one,
    not imported): it declares the same members, the optional ones as their
    defaults say.
    """

    is_recording = True
    #: a snapshot's own timestamp is the time it was recorded
    recorded_at_s: float | None = None

    def __init__(
        self,
        header: RecordingHeader,
        snapshots: Sequence[Snapshot],
        label: str,
        speed: float = 1.0,
        *,
        player: _ListPlayer | _StreamPlayer | None = None,
    ) -> None:
        if player is None:
            if not snapshots:
                raise RecordingError("the recording holds no snapshots")
            player = _ListPlayer(snapshots)
        self._player = player
        self.header = header
        self.label = label
        self.speed = speed
        #: the snapshot last returned, 1-based within the current pass
        self.position = 0
        self.loops = 0
        interval = header.interval_s or self._first_gap(snapshots) or 1.0
        self.natural_interval_s: float | None = max(0.1, interval / speed)

    def _first_gap(self, snapshots: Sequence[Snapshot]) -> float | None:
        player = self._player
        if isinstance(player, _StreamPlayer):
            first, second = player.first, player.peek_second()
            pair = [first, second] if first is not None and second is not None else []
        else:
            pair = list(snapshots[:2])
        if len(pair) < 2:
            return None
        gap = pair[1].timestamp_s - pair[0].timestamp_s
        return gap if 0 < gap <= MAX_INTERVAL_S else None

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], speed: float = 1.0) -> ReplaySource:
        player = _StreamPlayer(_file_opener(path), MAX_TOTAL_BYTES)
        return cls(player.header, (), f"recording: {clean(Path(path).name)}", speed, player=player)

    @classmethod
    def demo(cls, speed: float = 1.0, name: str = "h100") -> ReplaySource:
        player = _StreamPlayer(_demo_opener(name), MAX_TOTAL_BYTES)
        header = player.header
        where = f" of {clean(header.note)}" if header.note else ""
        return cls(header, (), f"DEMO: recording{where}", speed, player=player)

    @property
    def name(self) -> str:
        """The recording, as its errors name it (the file's cleaned path)."""
        player = self._player
        return player.name if isinstance(player, _StreamPlayer) else self.label

    @property
    def total(self) -> int | None:
        """How many snapshots one pass plays; None while they are being counted."""
        return self._player.total

    def progress(self) -> ReplayProgress:
        """Where the replay is; the first call starts counting the snapshots (after
        ``COUNT_DELAY_S``: the first frame is drawn meanwhile)."""
        self._player.start_counting(COUNT_DELAY_S)
        player = self._player
        return ReplayProgress(self.position, player.total, self.loops, player.ends_early)

    @property
    def ends_early(self) -> int | None:
        """The file ends early (cut off, or still being written), after this many
        snapshots; None: it ends whole, or that is not known yet (the count, or
        the first pass to its end, says)."""
        return self._player.ends_early

    def ends_early_note(self) -> str | None:
        """What to say of a recording that ends early (None: nothing)."""
        count = self._player.ends_early
        return None if count is None else ends_early(self.name, count)

    def use_view(self, in_view: InView) -> None:
        """A recording reads every process alike: which are on screen is not asked."""

    def count(self, timeout_s: float = 60.0) -> int | None:
        """The number of snapshots, waiting up to ``timeout_s`` for the count."""
        self._player.start_counting()
        player = self._player
        if isinstance(player, _StreamPlayer):
            player.wait_counted(timeout_s)
        return player.total

    def sample(self) -> Snapshot:
        player = self._player
        try:
            snapshot = player.next_in_pass()
        except RecordingError:
            # A damaged line: skipped, and said (the monitor shows the error).
            self.position += 1
            raise
        if snapshot is None:
            # The end: one pass is exactly what was played (the count may have
            # included a cut-off last line).
            if self.position:
                player.total = self.position
            player.restart()
            self.position = 0
            self.loops += 1
            snapshot = player.next_in_pass()
            if snapshot is None:
                raise RecordingError(f"{self.label}: the recording holds no snapshots")
        self.position += 1
        return snapshot

    def close(self) -> None:
        self._player.close()
