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
from collections.abc import Callable
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
MAX_VALUE_BYTES = 64 << 20


#: the first read of a file (doubled while reads fill it, up to CHUNK)
FIRST_READ = 64 << 10


#: the first window of text a value is decoded from (widened 4x while too short)
FIRST_WINDOW = 4096


_SEP = re.compile(rb"[ \t\n\r]*([,\]])[ \t\n\r]*")


_WS = re.compile(rb"[ \t\n\r]*")


_BOM = b"\xef\xbb\xbf"
_OPEN_BRACE, _OPEN_BRACKET, _CLOSE_BRACKET = b"{[]"


#: UTF-8 to text, leaving a character cut by the window's end for the next try
_UTF8 = codecs.utf_8_decode


_DECODER = json.JSONDecoder()


#: the C scanner itself: raw_decode adds a Python frame per event
_SCAN = _DECODER.scan_once  # type: ignore[attr-defined]


class TraceError(GputuiError):
    """A trace file that cannot be read: one line, exit status 2."""


class ByteSource:
    """The JSON bytes of a plain or gzip-compressed file, a chunk at a time,
    counting (and bounding) the JSON bytes in ``counter[0]`` (and, when it has a
    second slot, the bytes of the file read so far in ``counter[1]``).

    The bytes are checked to be UTF-8 but not decoded: a chunk of ASCII, which
    is what a trace is nearly all made of, is checked by one C call; any other
    goes through an incremental UTF-8 decoder whose text is dropped."""

    def __init__(self, raw: BinaryIO, file_bytes: int, where: str, counter: list[int]) -> None:
        head = raw.read(2)
        raw.seek(0)
        self.raw = raw
        self.compressed = head == b"\x1f\x8b"
        self.stream: Any = gzip.GzipFile(fileobj=raw, mode="rb") if self.compressed else raw
        self.file_bytes = file_bytes
        self.where = where
        self.counter = counter
        self.total = 0
        self.utf8 = codecs.getincrementaldecoder("utf-8")("strict")
        self.pending = False  # the checker holds the first bytes of a character
        #: the buffer each chunk is read into: from :data:`FIRST_READ` bytes (a
        #: small trace takes no more), doubled while reads fill it, up to CHUNK
        self.scratch = bytearray(min(CHUNK, FIRST_READ))
        self.view = memoryview(self.scratch)
        self.ahead_of: Inflater | None = None  # (see :meth:`ahead`)

    def ahead(self) -> None:
        """Inflate a gzip file's next chunks in a thread while the reader works
        on the last ones (zlib gives the interpreter up while it inflates);
        nothing for a plain file.  Call :meth:`close` when done.  The chunks
        already read are inflated again and left out."""
        if self.compressed and self.ahead_of is None:
            self.ahead_of = Inflater(self.raw, self.where, self.total)

    def close(self) -> None:
        """Stop the thread of :meth:`ahead`, if any."""
        if self.ahead_of is not None:
            self.ahead_of.close()

    def read_into(self, target: bytearray, at: int) -> int:
        """Write the next chunk into ``target`` at ``at`` and say how many bytes
        it holds, 0 at the end.  The chunk is read into a buffer of this
        source's, reused: a new megabyte of memory per chunk costs more than
        the copy (the page faults of fresh memory)."""
        where = self.where
        scratch = self.scratch
        try:
            ahead = self.ahead_of
            k = self.stream.readinto(scratch) if ahead is None else ahead.readinto(self.view)
        except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
            if isinstance(exc, EOFError):
                raise TraceError(f"{where}: truncated (the compressed stream ends early)") from None
            raise TraceError(f"{where}: not a readable gzip file ({exc})") from None
        if not k:
            if self.pending:
                raise TraceError(f"{where}: truncated inside a UTF-8 character")
            return 0
        self.total = total = self.total + k
        counter = self.counter
        counter[0] = total
        if len(counter) > 1:
            counter[1] = self.raw.tell()
        if total > MAX_JSON_BYTES:
            raise TraceError(
                f"{where}: more than {fmt.size(MAX_JSON_BYTES)} of JSON; refusing to read it"
            )
        if self.compressed and total > RATIO_FLOOR and total > MAX_RATIO * max(self.file_bytes, 1):
            raise TraceError(
                f"{where}: decompresses to more than {MAX_RATIO}x its size; refusing to read it"
            )
        data = self.view[:k]
        if self.pending or not (scratch if k == len(scratch) else scratch[:k]).isascii():
            try:
                self.utf8.decode(data)
            except UnicodeDecodeError:
                raise TraceError(f"{where}: not UTF-8 text; not a JSON trace") from None
            self.pending = bool(self.utf8.getstate()[0])
        target[at : at + k] = data  # (the target grows where it is too short)
        if k == len(scratch) < CHUNK:
            data.release()
            self.view.release()
            self.scratch = bytearray(min(CHUNK, 2 * k))
            self.view = memoryview(self.scratch)
        return k


#: how long the reader waits for the inflating thread's next chunk
INFLATE_TIMEOUT_S = 300.0
#: the chunks the thread inflates into, and how many may be ahead of the reader
INFLATE_CHUNK = 16 << 20
INFLATE_AHEAD = 2
#: the compressed bytes it reads at a time
INFLATE_READ = 4 << 20


class Inflater:
    """A gzip file inflated by a thread, :data:`INFLATE_AHEAD` chunks ahead of
    the reader, into buffers that go round (a new chunk each time would cost
    its page faults).

    zlib gives the interpreter up while it reads and inflates, but the thread
    needs it back between two calls, and waits up to the switch interval (5
    ms) for it while the reader works: so each call inflates a whole chunk,
    not the gzip module's 128 kB at a time.  Members are read one after the
    other, as the gzip module reads them; a stream that ends inside a member
    is an :class:`EOFError`, a corrupt one a ``zlib.error``, where the reader
    would have met them."""

    def __init__(self, raw: Any, where: str, skip: int = 0) -> None:
        import queue
        import threading

        self.raw = raw
        self.where = where
        self.skip = skip  # the inflated bytes the reader already has
        self.free: Any = queue.Queue()
        self.full: Any = queue.Queue()
        for _ in range(INFLATE_AHEAD):
            self.free.put(bytearray(INFLATE_CHUNK))
        self.stopping = threading.Event()
        self.held: Any = None  # the chunk being read: (buffer, bytes in it)
        self.at = 0  # how far into it
        self.thread = threading.Thread(target=self._run, name="gputui-inflate", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import queue

        try:
            inflate = _members(self.raw)
            skip = self.skip
            while skip:  # (inflated again from the start: a few megabytes)
                buf = bytearray(min(skip, INFLATE_CHUNK))
                k = inflate(buf)
                if not k:
                    raise EOFError("the compressed stream ends early")
                skip -= k
            while not self.stopping.is_set():
                try:
                    buf = self.free.get(timeout=0.25)
                except queue.Empty:
                    continue
                k = inflate(buf)
                self.full.put((buf, k))
                if not k:
                    return
        except BaseException as exc:  # (handed to the reader, which says it)
            self.full.put((exc, 0))

    def readinto(self, target: memoryview) -> int:
        """Copy the next bytes into ``target``: how many, 0 at the end."""
        import queue

        if self.held is None:
            try:
                got = self.full.get(timeout=INFLATE_TIMEOUT_S)
            except queue.Empty:
                raise TraceError(
                    f"{self.where}: reading stalled for {INFLATE_TIMEOUT_S:.0f} s"
                ) from None
            if isinstance(got[0], BaseException):
                raise got[0]
            if not got[1]:
                return 0
            self.held, self.at = got, 0
        buf, k = self.held
        n = min(len(target), k - self.at)
        target[:n] = memoryview(buf)[self.at : self.at + n]
        self.at += n
        if self.at == k:
            self.free.put(buf)
            self.held = None
        return n

    def close(self) -> None:
        self.stopping.set()
        self.free.put(bytearray(0))  # (wakes a thread waiting for a buffer)
        self.thread.join(timeout=INFLATE_TIMEOUT_S)


def _members(raw: Any) -> Callable[[bytearray], int]:
    """A function that fills a buffer with the next inflated bytes of the gzip
    members in ``raw`` (from its start) and says how many, 0 at the end."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    tail = b""  # compressed bytes read and not yet taken by ``d``
    raw.seek(0)

    def fill(buf: bytearray) -> int:
        nonlocal d, tail
        n = 0
        with memoryview(buf) as view:
            while n < len(buf):
                pending = tail
                if d.eof:  # (its unconsumed tail holds its unused data too)
                    pending = d.unused_data
                    if not pending:
                        pending = raw.read(INFLATE_READ)
                    if not pending.strip(b"\0"):
                        break  # the end (a gzip file may be padded with zeros)
                    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                if not pending:
                    pending = raw.read(INFLATE_READ)
                    if not pending:
                        raise EOFError("the compressed stream ends inside a member")
                out = d.decompress(pending, len(buf) - n)
                tail = d.unconsumed_tail
                view[n : n + len(out)] = out
                n += len(out)
        return n

    return fill


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
    """A window on the bytes: values are decoded as soon as they are complete,
    and the consumed bytes are dropped.

    The window is one ``bytearray`` that is reused, so a chunk costs one copy
    and no new allocation; its first ``n`` bytes are the text, ``pos`` the next
    byte to read.  Events are decoded a batch at a time (see :meth:`_batch`);
    a value that is not part of a batch (the top-level keys and their values,
    an element a batch cannot take) is decoded by the standard decoder from a
    window of text that widens until the value is whole.

    ``typed``, when given, is offered each batch of whole events first (the
    bytes of a JSON array, as a memoryview valid for the call only): it returns
    True when it took them, False to leave them to the standard decoder (which
    then decides whether they are valid JSON)."""

    def __init__(
        self,
        read_into: Callable[[bytearray, int], int],
        where: str,
        typed: Callable[[memoryview], bool] | None = None,
    ) -> None:
        self.read_into = read_into
        self.where = where
        self.typed = typed
        self.buf = bytearray()
        self.n = 0  # the bytes of ``buf`` that hold text
        self.pos = 0
        self.base = 0  # offset in the text of buf[0]
        self.one_by_one_until = 0  # (an offset in the text) no batch before it
        self.eof = False

    def fill(self) -> bool:
        """Append the next chunk, first dropping the bytes before ``pos`` but
        one (the room :meth:`_take` writes a '[' into)."""
        if self.eof:
            return False
        buf = self.buf
        keep = self.pos - 1 if self.pos > 0 else 0
        rest = self.n - keep
        if keep:
            buf[:rest] = buf[keep : self.n]
        self.base += keep
        self.pos -= keep
        self.n = rest
        k = self.read_into(buf, rest)
        if not k:
            self.eof = True
            return False
        self.n = rest + k
        return True

    def fail(self, problem: str) -> TraceError:
        return TraceError(f"{self.where}: {problem}")

    def char(self) -> str:
        """The next non-blank character (not consumed); '' at the end.  A byte
        past ASCII comes as the character of its value: it is only compared."""
        while True:
            self.pos = _WS.match(self.buf, self.pos, self.n).end()  # type: ignore[union-attr]
            if self.pos < self.n:
                return chr(self.buf[self.pos])
            if not self.fill():
                return ""

    def expect(self, ch: str, what: str) -> None:
        got = self.char()
        if got != ch:
            if not got:
                raise self.fail(f"truncated (expected {what})")
            raise self.fail(f"not a JSON trace (expected {what} at byte {self.base + self.pos})")
        self.pos += 1

    def value(self) -> Any:
        self.char()
        obj, self.pos = self._decode(self.pos)
        return obj

    def _decode(self, pos: int) -> tuple[Any, int]:
        """The JSON value at ``pos`` and where it ends, decoded from a window of
        text that widens while the value runs past it, reading on while the
        text ends inside it."""
        window = FIRST_WINDOW
        while True:
            stop = min(pos + window, self.n)
            with memoryview(self.buf) as view:
                text, used = _UTF8(view[pos:stop], "strict", False)
            whole = stop == self.n and self.eof  # no more text after the window
            try:
                obj, end = _SCAN(text, 0)
            except StopIteration as stop_at:  # no value starts here
                err_pos, msg = stop_at.value, "Expecting value"
            except json.JSONDecodeError as exc:
                err_pos, msg = exc.pos, exc.msg
            else:
                if end < len(text) or whole:  # (a number may go on past the window)
                    if used != len(text):  # not all ASCII: count the value's bytes
                        end = len(text[:end].encode())
                    return obj, pos + end
                err_pos, msg = end, "Unterminated"
            incomplete = err_pos >= len(text) - 8 or msg.startswith("Unterminated")
            if incomplete and stop < self.n:
                window *= 4
                continue
            if incomplete and not self.eof and self.n - pos < MAX_VALUE_BYTES:
                self.pos = pos
                self.fill()  # (at the end, the next try knows no more text comes)
                pos = self.pos
                continue
            self.pos = pos
            if incomplete and self.eof:
                raise self.fail("truncated (the JSON ends inside a value)") from None
            if incomplete:
                raise self.fail(f"a JSON value of more than {fmt.size(MAX_VALUE_BYTES)}")
            raise self.fail(f"invalid JSON: {msg}") from None

    def _batch(self, each: Callable[[list[Any]], None]) -> bool:
        """Decode the whole elements between here and the last ``},`` that is
        followed by ``{`` in one call (the C decoder at full speed, keys shared),
        if that text is a valid run of elements.  A ``},`` inside a string (a
        kernel name's ``{lambda()#1}, ...``) makes the run invalid, never wrong:
        an earlier cut is tried, and after a few the elements go one by one."""
        if self.base + self.pos < self.one_by_one_until:
            return False
        buf, pos, n = self.buf, self.pos, self.n
        end = n
        for attempt in range(BATCH_ATTEMPTS):
            cut = buf.rfind(b"},", pos, end)
            if cut <= pos:
                if attempt == 0 and n - pos < CHUNK and self.fill():
                    # the rest of the text is an event cut short by the chunk:
                    # read on, so that it starts the next batch (once)
                    return self._batch(each)
                return False
            end = cut
            nxt = _WS.match(buf, cut + 2, n).end()  # type: ignore[union-attr]
            if nxt >= n or buf[nxt] != _OPEN_BRACE:
                continue  # not between two objects: inside a string
            if self._take(pos, cut + 1, each):
                self.pos = cut + 2
                return True
        self.one_by_one_until = self.base + end + 2
        return False

    def _take(self, start: int, stop: int, each: Callable[[list[Any]], None]) -> bool:
        """Decode ``buf[start:stop]``, a run of elements, as one array: the byte
        before it (consumed) becomes '[' and the ',' after it ']' for the call,
        so the decoders read the window itself, not a copy.  False where the
        text is not valid JSON."""
        buf = self.buf
        if start == 0:  # no byte before the run (the top of the text): a copy
            text = b"[" + bytes(buf[:stop]) + b"]"
            with memoryview(text) as view:
                if self.typed is not None and self.typed(view):
                    return True
            try:
                items = _DECODER.decode(text.decode())
            except json.JSONDecodeError:
                return False
            each(items)
            return True
        before, after = buf[start - 1], buf[stop]
        buf[start - 1], buf[stop] = _OPEN_BRACKET, _CLOSE_BRACKET
        view = memoryview(buf)[start - 1 : stop + 1]
        try:
            if self.typed is not None and self.typed(view):
                return True
            try:
                items = _DECODER.decode(str(view, "utf-8"))
            except json.JSONDecodeError:
                return False
        finally:
            buf[start - 1], buf[stop] = before, after
            try:
                view.release()
            except BufferError:
                # a decoded value still holds the bytes (a Raw kept): leave them
                # to it, and read on in a copy
                self.buf = bytearray(buf)
        each(items)
        return True

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
            m = sep(self.buf, end, self.n)
            if m is None or m.end() == self.n:
                self.pos = end
                while m is None or m.end() == self.n:
                    if not self.fill():
                        break
                    m = sep(self.buf, self.pos, self.n)
                if m is None:
                    rest = self.buf[self.pos : self.n]
                    if self.eof and not rest.strip():
                        raise self.fail("truncated (the event list does not end)")
                    at = self.base + self.pos
                    raise self.fail(f"invalid JSON: expected ',' or ']' at byte {at}")
            self.pos = m.end()
            if m.group(1) == b"]":
                return
            if self.pos < self.n and self.buf[self.pos] == _CLOSE_BRACKET:
                self.pos += 1  # a trailing comma
                return

    def document(self, each: Callable[[list[Any]], None]) -> dict[str, Any]:
        """Stream a trace: either ``{"traceEvents": [...], ...}`` or a bare array
        of events.  Returns the other top-level keys."""
        self.char()
        while self.n - self.pos < len(_BOM) and self.fill():
            pass
        if self.buf.startswith(_BOM, self.pos, self.n):
            self.pos += len(_BOM)
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
            at = self.base + self.pos
            raise self.fail(f"invalid JSON: extra data after the trace at byte {at}")
        return meta
