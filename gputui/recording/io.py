"""Reading recording files as a bounded stream of lines.

Both kinds of recording (monitor snapshots, attach sessions) are JSON lines,
gzip-compressed or plain.  A recording is untrusted input: someone else's file,
a download, a file named by mistake.  So it is read here, never whole:

- only a regular file is opened (a FIFO, a device such as ``/dev/zero``, a
  directory or a socket is refused at once, without reading: a FIFO opened
  without ``O_NONBLOCK`` would block until a writer appears);
- it is decompressed in small pieces, each bounded, so that memory stays
  bounded whatever the file inflates to;
- a line may be at most ``MAX_LINE_BYTES`` long and the whole stream at most
  ``max_total`` bytes once decompressed: a gzip bomb (zeros without a newline)
  is refused after ``MAX_LINE_BYTES``, not after gigabytes;
- empty lines are never written by gputui: a few are skipped, many are refused.

A stream that ends without gzip's end marker (a recorder killed mid-write) ends
there; everything before it is still read.  A last line without its newline is
marked, so that a reader can forgive that one line if it does not parse.  Either
way the reader says so (``cut_short``), and the commands that play a recording
say on stderr that it ends early, and after what (:func:`ends_early`).
"""

from __future__ import annotations

import io
import json
import math
import os
import stat
import zlib
from collections.abc import Callable, Iterator
from typing import IO, Any

from gputui.errors import GputuiError
from gputui.fmt import clean


class RecordingError(GputuiError):
    """A recording that is missing, unreadable, or not a valid gputui recording."""


#: the longest line read or written: a snapshot of 20,000 GPU processes is about
#: 9 MB (command lines of ~120 characters), one of 70,000 about 31 MB (a hook
#: frame at most 4 MiB, plus the recording's wrapper)
MAX_LINE_BYTES = 32 * 2**20
#: the most a monitor recording may hold, decompressed: about two weeks at 1 s of
#: an 8-GPU machine; the replay reads it as a stream, so this bounds time, not memory
MAX_TOTAL_BYTES = 4 * 2**30
#: empty lines skipped before a file is refused as not a recording
MAX_BLANK_LINES = 16
#: compressed bytes read per step
READ_CHUNK = 2**16
#: decompressed bytes produced per step (the bound on memory besides one line)
INFLATE_CHUNK = 2**18
#: integers with more digits than this are out of every range gputui uses; the
#: JSON reader turns them into an infinity (out of range) instead of building them
MAX_INT_DIGITS = 24

_GZIP_MAGIC = b"\x1f\x8b"


def open_private(path: str | os.PathLike[str]) -> IO[bytes]:
    """``path`` created (or truncated) for writing, readable by its owner only.

    Recordings hold command lines and profiler captures: 0600, like the traces.
    A file that already exists is made private too, when it is a regular file (a
    device named by mistake, ``/dev/null`` say, keeps its mode).
    """
    name = clean(os.fspath(path))
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        raise RecordingError(f"cannot write recording {name}: {exc.strerror}") from None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.fchmod(fd, 0o600)
        return os.fdopen(fd, "wb")
    except OSError as exc:
        os.close(fd)
        raise RecordingError(f"cannot write recording {name}: {exc.strerror}") from None


def open_regular(path: str | os.PathLike[str]) -> IO[bytes]:
    """``path`` opened for reading, if it is a regular file; RecordingError if not."""
    name = clean(os.fspath(path))
    try:
        # O_NONBLOCK: opening a FIFO for reading must not wait for a writer (it is
        # refused right after, by its type); regular files ignore the flag.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise RecordingError(f"recording not found: {name}") from None
    except IsADirectoryError:
        raise RecordingError(f"recording is a directory: {name}") from None
    except OSError as exc:
        raise RecordingError(f"cannot read recording {name}: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise RecordingError(f"{name}: {_kind(mode)}, not a recording file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


class LineReader:
    """The lines of one recording stream, decompressed as they are read.

    Iterating yields ``(number, line)``: the 1-based line number in the file and
    the line's bytes without its newline, empty lines left out.  ``complete`` is
    False while the last line yielded had no newline after it (the file ends in
    the middle of a line).  Raises RecordingError for a line or a stream over
    its bound, and for compressed data that is corrupt.
    """

    def __init__(
        self,
        raw: IO[bytes],
        name: str,
        max_total: int = MAX_TOTAL_BYTES,
        max_line: int = MAX_LINE_BYTES,
    ) -> None:
        self._raw = raw
        self.name = name
        self.max_total = max_total
        self.max_line = max_line
        #: decompressed bytes so far
        self.total = 0
        #: compressed (file) bytes read so far
        self.consumed = 0
        self.complete = True
        #: False when compressed data stopped before its end marker: a recorder
        #: still writing (or killed)
        self.ended = True
        self._number = 0
        self._blank = 0

    @property
    def cut_short(self) -> bool:
        """The file ended early: compressed data without its end marker, or a
        last line without its newline (a recorder killed, or still writing)."""
        return not self.ended or not self.complete

    def close(self) -> None:
        self._raw.close()

    def __enter__(self) -> LineReader:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _chunks(self) -> Iterator[bytes]:
        """Decompressed pieces of at most INFLATE_CHUNK bytes."""
        first = self._read()
        if not first.startswith(_GZIP_MAGIC):
            data = first
            while data:
                yield data
                data = self._read()
            return
        pending = first
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        while True:
            try:
                out = inflater.decompress(pending, INFLATE_CHUNK)
            except zlib.error:
                raise RecordingError(
                    f"{self.name}: corrupt compressed data after line {self._number}"
                ) from None
            pending = inflater.unconsumed_tail
            if out:
                yield out
            if inflater.eof:
                # Concatenated gzip members are one stream (``cat a.gz b.gz``).
                rest = inflater.unused_data or self._read()
                if not rest:
                    return
                if not rest.startswith(_GZIP_MAGIC):
                    raise RecordingError(
                        f"{self.name}: unexpected data after the compressed stream"
                    )
                inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
                pending = rest
                continue
            if not pending:
                pending = self._read()
                if not pending:
                    # No end marker: a recorder killed mid-write, or still writing.
                    # What came out is good.
                    self.ended = False
                    return

    def _read(self) -> bytes:
        try:
            data = self._raw.read(READ_CHUNK)
        except OSError as exc:
            raise RecordingError(f"cannot read recording {self.name}: {exc.strerror}") from None
        data = data or b""
        self.consumed += len(data)
        return data

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        # The pieces of a line that spans chunks, joined once at its end (a line
        # of 20,000 processes spans 30 chunks: one copy, not one a chunk)
        parts: list[bytes] = []
        held = 0
        for chunk in self._chunks():
            self.total += len(chunk)
            if self.total > self.max_total:
                raise RecordingError(
                    f"{self.name}: more than {mib(self.max_total)} of data once decompressed; "
                    "gputui reads at most that"
                )
            start = 0
            while True:
                end = chunk.find(b"\n", start)
                if end < 0:
                    break
                if parts:
                    parts.append(chunk[start:end])
                    line = b"".join(parts)
                    parts.clear()
                    held = 0
                else:
                    line = chunk[start:end]
                start = end + 1
                yield from self._emit(line)
            if start < len(chunk):
                parts.append(chunk[start:])
                held += len(chunk) - start
                if held > self.max_line:
                    raise RecordingError(
                        f"{self.name}: line {self._number + 1} is longer than "
                        f"{mib(self.max_line)}: not a gputui recording"
                    )
        if parts:
            self.complete = False
            yield from self._emit(b"".join(parts))

    def _emit(self, line: bytes) -> Iterator[tuple[int, bytes]]:
        self._number += 1
        if len(line) > self.max_line:
            raise RecordingError(
                f"{self.name}: line {self._number} is longer than {mib(self.max_line)}: "
                "not a gputui recording"
            )
        if not line.strip():
            self._blank += 1
            if self._blank > MAX_BLANK_LINES:
                raise RecordingError(f"{self.name}: too many empty lines: not a gputui recording")
            return
        yield self._number, line


def ends_early(name: str, count: int, what: str = "snapshot") -> str:
    """What a command says of a recording that ends early: after which of its
    snapshots (or messages) it stops."""
    after = f"after {what} {count:,}" if count else f"before its first {what}"
    return f"{name} ends early, {after} (cut off, or still being written)"


def mib(n: int) -> str:
    return f"{n / 2**30:g} GiB" if n >= 2**30 else f"{n / 2**20:g} MiB"


def embedded_bytes(name: str) -> bytes:
    """A file of ``gputui/data`` (the embedded demos), read from beside the package's
    modules; ``importlib.resources`` (a few ms more to import) only when the package
    is not on the file system (a zip)."""
    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", name)
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        from importlib import resources

        return resources.files("gputui.data").joinpath(name).read_bytes()


def reader_for_bytes(data: bytes, name: str, max_total: int = MAX_TOTAL_BYTES) -> LineReader:
    """A LineReader over bytes in memory (the embedded demos, tests)."""
    return LineReader(io.BytesIO(data), name, max_total)


def _big_int(text: str) -> int | float:
    # Python refuses to build an int of more than 4,300 digits (ValueError) and
    # building one costs quadratic time below that: no field needs more than 24.
    if len(text) > MAX_INT_DIGITS:
        return -math.inf if text.startswith("-") else math.inf
    return int(text)


def _no_constant(_name: str) -> None:
    # NaN, Infinity and -Infinity are not JSON; Python's reader accepts them.
    # They read as null (N/A), as gputui writes a NaN.
    return None


def _int_or_null(text: str) -> int | None:
    return None if len(text) > MAX_INT_DIGITS else int(text)


def _finite_or_null(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


_DECODER = json.JSONDecoder(parse_int=_big_int, parse_constant=_no_constant)
#: for messages passed on as they are (attach recordings): what is not a finite
#: number of a sane size is null, so no reader downstream meets an infinity
_MESSAGE_DECODER = json.JSONDecoder(
    parse_int=_int_or_null, parse_float=_finite_or_null, parse_constant=_no_constant
)


def load_message_line(line: bytes) -> Any:
    """Like :func:`load_line`, with every number outside a float's finite range, and
    every integer of more than 24 digits, read as null."""
    return load_line(line, _MESSAGE_DECODER)


def load_line(line: bytes, decoder: json.JSONDecoder = _DECODER) -> Any:
    """One JSON value from ``line``; ValueError if it is not JSON.

    Hostile but well-formed JSON is defused: a huge integer reads as an infinity
    (out of every range), NaN and Infinity as null, deep nesting as a ValueError
    (not a RecursionError), invalid UTF-8 as a ValueError.
    """
    try:
        text = line.decode("utf-8")
        value, end = decoder.raw_decode(text, _skip_space(text, 0))
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if _skip_space(text, end) != len(text):
        raise ValueError("extra data after the JSON value")
    return value


def load_object(text: bytes) -> dict[str, Any]:
    """The JSON object that is the whole of ``text`` (no space around it: a piece
    of a line gputui wrote); ValueError otherwise.  :func:`load_line`, lighter."""
    decoded = text.decode("utf-8")
    try:
        value, end = _DECODER.raw_decode(decoded)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if end != len(decoded) or type(value) is not dict:
        raise ValueError("not one JSON object")
    return value


#: :data:`_DECODER` without its hook on every integer (a call per number), for
#: values whose every number is then range-checked (a snapshot's): an integer of
#: more than 19 digits is outside every range, as the infinity it reads as there
#: is, and one of more than 4,300 digits is a ValueError (Python's own bound)
_PLAIN_DECODER = json.JSONDecoder(parse_constant=_no_constant)


def load_objects(pieces: list[bytes], head: bytes, tail: bytes) -> list[dict[str, Any]]:
    """The JSON object that is the whole of ``head + piece + tail``, for each piece
    (ValueError if one is not), for values that are range-checked after (see
    :data:`_PLAIN_DECODER`).  Many small objects cost less than one at a time:
    the pieces are decoded as one text, and the C scanner reads each from where
    it starts to exactly where it ends."""
    text = (tail + b"," + head).join(pieces).join((head, tail)).decode("utf-8")
    if not text.isascii():  # a character is not a byte: where each starts is not known
        return [load_object(head + piece + tail) for piece in pieces]
    scan: Callable[[str, int], tuple[Any, int]] = _PLAIN_DECODER.scan_once  # type: ignore[attr-defined]
    frame = len(head) + len(tail)
    values: list[dict[str, Any]] = []
    start = 0
    try:
        for piece in pieces:
            value, end = scan(text, start)
            if end != start + frame + len(piece) or type(value) is not dict:
                raise ValueError("not one JSON object")
            values.append(value)
            start = end + 1
    except StopIteration:
        raise ValueError("not one JSON object") from None
    except RecursionError:
        raise ValueError("nested too deeply") from None
    return values


def value_end(text: str) -> int:
    """Where the one JSON value at the start of ``text`` ends (what follows it is
    not read); ValueError if there is none, defused as :func:`load_line` is."""
    try:
        _value, end = _DECODER.raw_decode(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    return int(end)


def _skip_space(text: str, index: int) -> int:
    while index < len(text) and text[index] in " \t\r\n":
        index += 1
    return index
