"""A torch.profiler trace read as a stream: the top-level object key by key, the
events in batches, so a multi-gigabyte trace never sits in memory whole; sizes
and compression ratios bounded (a gzip bomb or a runaway value is refused with
one line, exit status 2)."""

from __future__ import annotations

import codecs
import gzip
import json
import re
import zlib
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from gputui import fmt
from gputui.errors import GputuiError

MAX_JSON_BYTES = 4 << 30


#: JSON traces compress 10-20x; beyond this (once past RATIO_FLOOR) it is a bomb
MAX_RATIO = 100


RATIO_FLOOR = 64 << 20


CHUNK = 1 << 20


#: cuts tried per batch before decoding one event at a time
BATCH_ATTEMPTS = 8


#: the longest single JSON value (an event, a metadata block) we wait for
MAX_VALUE_CHARS = 64 << 20


_SEP = re.compile(r"[ \t\n\r]*([,\]])[ \t\n\r]*")


_WS = re.compile(r"[ \t\n\r]*")


_DECODER = json.JSONDecoder()


#: the C scanner itself: raw_decode adds a Python frame per event
_SCAN = _DECODER.scan_once  # type: ignore[attr-defined]


class TraceError(GputuiError):
    """A trace file that cannot be read: one line, exit status 2."""


def text_chunks(raw: BinaryIO, file_bytes: int, where: str, counter: list[int]) -> Iterator[str]:
    """Decoded text of a plain or gzip-compressed file, chunk by chunk, counting
    (and bounding) the JSON bytes in ``counter[0]`` (and, when it has a second
    slot, the bytes of the file read so far in ``counter[1]``)."""
    head = raw.read(2)
    raw.seek(0)
    compressed = head == b"\x1f\x8b"
    stream: Any = gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    total = 0
    while True:
        try:
            data = stream.read(CHUNK)
        except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
            if isinstance(exc, EOFError):
                raise TraceError(f"{where}: truncated (the compressed stream ends early)") from None
            raise TraceError(f"{where}: not a readable gzip file ({exc})") from None
        if not data:
            break
        total += len(data)
        counter[0] = total
        if len(counter) > 1:
            counter[1] = raw.tell()
        if total > MAX_JSON_BYTES:
            raise TraceError(
                f"{where}: more than {fmt.size(MAX_JSON_BYTES)} of JSON; refusing to read it"
            )
        if compressed and total > RATIO_FLOOR and total > MAX_RATIO * max(file_bytes, 1):
            raise TraceError(
                f"{where}: decompresses to more than {MAX_RATIO}x its size; refusing to read it"
            )
        try:
            yield decoder.decode(data)
        except UnicodeDecodeError:
            raise TraceError(f"{where}: not UTF-8 text; not a JSON trace") from None
    try:
        yield decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise TraceError(f"{where}: truncated inside a UTF-8 character") from None


# -- a streaming reader of one JSON document ------------------------------------------------

#: the first line of gputui's own recordings (gputui.recording), and what reads each
_RECORDINGS = {
    "gputui-attach-recording": ("an attach recording", "gputui attach --replay FILE --once"),
    "gputui-recording": ("a monitor recording", "gputui --replay FILE"),
}


def _not_a_trace(kind: object) -> str:
    """Why a JSON object without ``traceEvents`` is not read: one of gputui's
    own recordings is named, with the command that reads it."""
    if isinstance(kind, str) and kind in _RECORDINGS:
        what, command = _RECORDINGS[kind]
        return f"{what} of gputui, not a trace: read it with {command}"
    return "no traceEvents: not a Chrome trace"


class JsonStream:
    """A window on the text: values are decoded with the standard decoder as
    soon as they are complete, and the consumed text is dropped.

    ``typed``, when given, is offered each batch of whole events first (the text
    of a JSON array): it returns True when it took them, False to leave them to
    the standard decoder (which then decides whether they are valid JSON)."""

    def __init__(
        self, chunks: Iterator[str], where: str, typed: Callable[[str], bool] | None = None
    ) -> None:
        self.chunks = chunks
        self.where = where
        self.typed = typed
        self.buf = ""
        self.pos = 0
        self.base = 0  # offset in the text of buf[0]
        self.one_by_one_until = 0  # (an offset in the text) no batch before it
        self.eof = False

    def fill(self) -> bool:
        if self.eof:
            return False
        for chunk in self.chunks:
            if chunk:
                self.base += self.pos
                self.buf = self.buf[self.pos :] + chunk
                self.pos = 0
                return True
        self.eof = True
        return False

    def fail(self, problem: str) -> TraceError:
        return TraceError(f"{self.where}: {problem}")

    def char(self) -> str:
        """The next non-blank character (not consumed); '' at the end."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.fill():
                return ""

    def expect(self, ch: str, what: str) -> None:
        got = self.char()
        if got != ch:
            if not got:
                raise self.fail(f"truncated (expected {what})")
            raise self.fail(f"not a JSON trace (expected {what} at character {self.pos})")
        self.pos += 1

    def value(self) -> Any:
        self.char()
        obj, self.pos = self._decode(self.pos)
        return obj

    def _decode(self, pos: int) -> tuple[Any, int]:
        """The JSON value at ``pos`` and where it ends, reading on while the
        text ends inside it."""
        while True:
            try:
                return _SCAN(self.buf, pos)  # type: ignore[no-any-return]
            except StopIteration as stop:  # no value starts here
                err_pos, msg = stop.value, "Expecting value"
            except json.JSONDecodeError as exc:
                err_pos, msg = exc.pos, exc.msg
            incomplete = err_pos >= len(self.buf) - 8 or msg.startswith("Unterminated")
            if incomplete and len(self.buf) - pos < MAX_VALUE_CHARS:
                self.pos = pos
                if self.fill():
                    pos = self.pos
                    continue
            self.pos = pos
            if incomplete and self.eof:
                raise self.fail("truncated (the JSON ends inside a value)") from None
            if incomplete:
                raise self.fail(f"a JSON value of more than {MAX_VALUE_CHARS} characters")
            raise self.fail(f"invalid JSON: {msg}") from None

    def _batch(self, each: Callable[[list[Any]], None]) -> bool:
        """Decode the whole elements between here and the last ``},`` that is
        followed by ``{`` in one call (the C decoder at full speed, keys shared),
        if that text is a valid run of elements.  A ``},`` inside a string (a
        kernel name's ``{lambda()#1}, ...``) makes the run invalid, never wrong:
        an earlier cut is tried, and after a few the elements go one by one."""
        if self.base + self.pos < self.one_by_one_until:
            return False
        buf, pos = self.buf, self.pos
        end = len(buf)
        for attempt in range(BATCH_ATTEMPTS):
            cut = buf.rfind("},", pos, end)
            if cut <= pos:
                if attempt == 0 and len(buf) - pos < CHUNK and self.fill():
                    # the rest of the text is an event cut short by the chunk:
                    # read on, so that it starts the next batch (once)
                    return self._batch(each)
                return False
            end = cut
            m = _WS.match(buf, cut + 2)
            nxt = m.end() if m else cut + 2
            if nxt >= len(buf) or buf[nxt] != "{":
                continue  # not between two objects: inside a string
            text = "[" + buf[pos : cut + 1] + "]"
            if self.typed is None or not self.typed(text):
                try:
                    items = _DECODER.decode(text)
                except json.JSONDecodeError:
                    continue
                each(items)
            self.pos = cut + 2
            return True
        self.one_by_one_until = self.base + end + 2
        return False

    def array(self, each: Callable[[list[Any]], None]) -> None:
        """Call ``each`` on the items of the array starting here, in order, a
        list of them at a time."""
        self.expect("[", "'['")
        if self.char() == "]":
            self.pos += 1
            return
        sep = _SEP.match
        while True:
            if self._batch(each):
                nxt = self.char()
                if not nxt:
                    raise self.fail("truncated (the event list does not end)")
                if nxt == "]":  # a trailing comma, as some writers leave
                    self.pos += 1
                    return
                continue
            obj, end = self._decode(self.pos)
            each([obj])
            m = sep(self.buf, end)
            if m is None or m.end() == len(self.buf):
                self.pos = end
                while m is None or m.end() == len(self.buf):
                    if not self.fill():
                        break
                    m = sep(self.buf, self.pos)
                if m is None:
                    if self.eof and self.pos >= len(self.buf.rstrip()):
                        raise self.fail("truncated (the event list does not end)")
                    raise self.fail(f"invalid JSON: expected ',' or ']' at character {self.pos}")
            self.pos = m.end()
            if m.group(1) == "]":
                return
            if self.pos < len(self.buf) and self.buf[self.pos] == "]":
                self.pos += 1  # a trailing comma
                return

    def document(self, each: Callable[[list[Any]], None]) -> dict[str, Any]:
        """Stream a trace: either ``{"traceEvents": [...], ...}`` or a bare array
        of events.  Returns the other top-level keys."""
        if self.char() == "\ufeff":
            self.pos += 1
        first = self.char()
        meta: dict[str, Any] = {}
        if first == "[":
            self.array(each)
        elif first == "{":
            self.pos += 1
            seen_events = False
            while True:
                if self.char() == "}":
                    self.pos += 1
                    break
                key = self.value()
                if not isinstance(key, str):
                    raise self.fail("not a JSON trace (an object key that is not a string)")
                self.expect(":", "':'")
                if key == "traceEvents":
                    self.array(each)
                    seen_events = True
                else:
                    meta[key] = self.value()
                nxt = self.char()
                if nxt == ",":
                    self.pos += 1
                elif nxt != "}":
                    raise self.fail("truncated" if not nxt else "invalid JSON: expected ',' or '}'")
            if not seen_events:
                raise self.fail(_not_a_trace(meta.get("type")))
        elif not first:
            raise self.fail("empty file")
        else:
            raise self.fail("not a JSON trace")
        if self.char():
            raise self.fail(f"invalid JSON: extra data after the trace at character {self.pos}")
        return meta
