"""The batches of one large trace decoded by worker processes.

The reader (:func:`gputui.tracefile.reader.read_trace`) cuts the event array
into batches of whole events as it reads.  Past the first megabytes of a large
trace it hands each batch to one of a few forked workers instead of decoding it
itself: a worker runs the same :class:`~gputui.tracefile.typed.TypedReader` on
it (the standard decoder where the typed one refuses a batch) and sends back
what the batch became, its records a column at a time.  The reader takes the
results in the batches' order, so the timeline and the op rows are the ones a
single process makes, record for record.  Decoding a batch and making its
records costs about six times what taking them back does.

A worker is forked when the reader has read the first batches itself: it
starts with the reader's state (the names seen, whether the ops carry shapes),
and a batch it reads never changes what the reader does with the next one.
Where one might (a thread named by a string: the reader numbers those in the
order they come), or where a batch is not JSON after all (the stream cuts
batches where an event seems to end, and a string can fool it), the workers
stop and :class:`FarmFailed` says to read the file again in one process.

The batches go to the workers through shared memory (two slots a worker), a
few bytes through a pipe saying which; the results come back through a pipe
each, read in order.  A worker never waits on the reader while the reader
waits on it: it is handed a batch only into a slot whose last result was read.
Nothing is pickled: the results are ``marshal`` data of ints, strings, bytes
and tuples, between the reader and the children it forked.
"""

from __future__ import annotations

import contextlib
import json
import marshal
import mmap
import os
import select
import signal
import struct
import sys
from array import array
from collections import deque
from collections.abc import Callable
from itertools import repeat
from typing import TYPE_CHECKING, Any

from gputui.trace.op_rows import NO_ARGS, OpTable
from gputui.trace.timeline import (
    ANNOTATION,
    DRIVER,
    GPU_ANNOTATION,
    GPU_OTHER,
    HOST_OTHER,
    KERNEL,
    MEMCPY,
    MEMSET,
    OP,
    PYTHON,
    RUNTIME,
    SYNC,
    Collective,
    GpuActivity,
    HostRange,
    RuntimeCall,
)

if TYPE_CHECKING:  # (the typed reader imports msgspec: only a large trace needs it)
    from gputui.tracefile.typed import TypedReader

#: a trace of less JSON than this is read in one process (a gzip file whose
#: trailer cannot say is taken as large)
FARM_MIN_JSON = 64 << 20
#: the JSON the reader decodes itself before it forks the workers
FARM_FROM_BYTES = 4 << 20
#: the most workers one trace gets
MAX_WORKERS = 8
#: the largest batch a worker is handed (larger ones are read by the reader)
SLOT_BYTES = 4 << 20
#: batches a worker may hold at once
SLOTS = 2
#: how long the reader waits for one result before it gives the workers up
RESULT_TIMEOUT_S = 300.0

_HEADER = struct.Struct("<QQ")  # to a worker: slot, length
_LENGTH = struct.Struct("<Q")  # from a worker: the result's length

#: every record kind, by index (a column of kinds is a column of small ints)
_ALL_KINDS = (KERNEL, MEMCPY, MEMSET, SYNC, GPU_OTHER, OP, ANNOTATION, GPU_ANNOTATION, PYTHON)
KINDS = tuple(dict.fromkeys((*_ALL_KINDS, HOST_OTHER, RUNTIME, DRIVER)))
_KIND_INDEX = {kind: i for i, kind in enumerate(KINDS)}

#: each record's fields: "q" an int column, "n" a name, "v" a thread id (both
#: sent as indexes into the worker's tables), "k" a kind
_LAYOUTS = {
    GpuActivity: "qqqknqqqq",
    RuntimeCall: "qqnvqqk",
    HostRange: "qqnvkq",
}


class FarmFailed(Exception):
    """The workers cannot give what one process would: read the file again
    in one process."""


def workers_wanted(json_bytes: int | None, cpus: int) -> int:
    """How many workers a trace of ``json_bytes`` of JSON gets on ``cpus``
    CPUs (None: a gzip file too large to say): none below
    :data:`FARM_MIN_JSON`, on one CPU, or where ``fork`` is missing."""
    if cpus < 2 or not hasattr(os, "fork"):
        return 0
    if json_bytes is not None and json_bytes < FARM_MIN_JSON:
        return 0
    return min(cpus, MAX_WORKERS)


def can_fork() -> bool:
    """Whether this process may fork workers: no other Python thread runs (a
    forked child has none of them, and could wait forever on a lock one held)."""
    threading = sys.modules.get("threading")
    return threading is None or threading.active_count() == 1


# -- in a worker --------------------------------------------------------------------------
class _Packer:
    """Turns what a batch added to a worker's reader into a result, and clears it."""

    def __init__(self, reader: TypedReader) -> None:
        from gputui.tracefile.typed import ShapeArgs

        self.shape_args = ShapeArgs
        self.reader = reader
        self.names: dict[str, int] = {}  # index of each name sent
        self.tids: dict[int, int] = {}  # index of each record's thread id sent
        self.threads: dict[Any, int] = {}  # index of each op's thread key sent
        self.shapes: dict[int, int] = {}  # id of each ShapeArgs sent -> index (0: no args)
        self.kept: list[Any] = []  # (the ShapeArgs indexed by id, kept alive)
        self.thread_ids = len(reader.builder.threads)
        self.given_up = reader.ops.given_up
        self.has_shapes = reader.ops.has_shapes
        self._clear()

    def _clear(self) -> None:
        b, ops = self.reader.builder, self.reader.ops
        tl = b.timeline
        tl.gpu, tl.runtime, tl.ranges, tl.collectives = [], [], [], []
        tl.events = tl.skipped = 0
        b.host_pid = None
        ops.ops, ops.launch_to_op, ops.activities, ops.steps = OpTable(), {}, [], []

    def batch(self, data: bytes) -> bytes:
        reader = self.reader
        if not reader.batch(memoryview(data)):
            try:
                events = json.loads(data)
            except (UnicodeDecodeError, json.JSONDecodeError):
                return marshal.dumps(("fail", "a batch is not JSON"))
            reader.builder.add(events)
            reader.ops.add(events)
        ops = reader.ops
        if len(reader.builder.threads) != self.thread_ids:
            return marshal.dumps(("fail", "a thread named by a string"))
        if ops.given_up != self.given_up or ops.has_shapes != self.has_shapes:
            return marshal.dumps(("fail", "the op rows changed their reading"))
        try:
            out = marshal.dumps(self._result())
        except (ValueError, OverflowError, TypeError) as exc:  # (a value marshal cannot take)
            out = marshal.dumps(("fail", f"a result marshal cannot hold ({exc})"))
        self._clear()
        return out

    def _name_index(self, names: Any) -> array:
        return _index(names, self.names, self.new_names)

    def _records(self, records: list[Any], layout: str) -> Any:
        """A list of records as columns (bytes), or as plain tuples where a
        value does not fit a column's type."""
        if not records:
            return None
        columns = list(zip(*records, strict=True))
        try:
            out = []
            for code, column in zip(layout, columns, strict=True):
                if code == "q":
                    out.append(array("q", column).tobytes())
                elif code == "n":
                    out.append(self._name_index(column).tobytes())
                elif code == "v":
                    out.append(_index(column, self.tids, self.new_tids).tobytes())
                else:
                    out.append(bytes(map(_KIND_INDEX.__getitem__, column)))
            return tuple(out)
        except (OverflowError, TypeError, KeyError):
            return [tuple(r) for r in records]

    def _result(self) -> tuple[Any, ...]:
        b, ops = self.reader.builder, self.reader.ops
        tl = b.timeline
        self.new_names: list[str] = []
        self.new_tids: list[int] = []
        gpu = self._records(tl.gpu, _LAYOUTS[GpuActivity])
        runtime = self._records(tl.runtime, _LAYOUTS[RuntimeCall])
        ranges = self._records(tl.ranges, _LAYOUTS[HostRange])
        collectives = [tuple(c) for c in tl.collectives]
        table = ops.ops
        op_part: Any = None
        if len(table):
            op_names = self._name_index(table.name).tobytes()
            new_threads: list[Any] = []
            threads = _index(table.tid, self.threads, new_threads).tobytes()
            new_shapes: list[bytes] = []
            shapes = self.shapes
            shape_args = self.shape_args
            sources: list[Any] = []
            for source in table.source:
                if source is NO_ARGS:
                    sources.append(0)
                elif type(source) is shape_args:
                    at = shapes.get(id(source))
                    if at is None:
                        at = shapes[id(source)] = len(self.kept) + 1
                        self.kept.append(source)
                        new_shapes.append(source.raw)
                    sources.append(at)
                else:
                    sources.append(source)  # (the standard decoder's args: a dict)
            with contextlib.suppress(TypeError, OverflowError):
                sources = array("I", sources).tobytes()  # type: ignore[assignment]
            times = tuple(
                col.tobytes() if type(col) is array else list(col)
                for col in (table.start, table.end)
            )
            op_part = (threads, new_threads, times, op_names, table.link, sources, new_shapes)
        return (
            "ok",
            tl.events,
            tl.skipped,
            b.host_pid,
            self.new_names,
            gpu,
            runtime,
            ranges,
            collectives,
            op_part,
            ops.launch_to_op,
            ops.activities,
            ops.steps,
            self.new_tids,
        )


def _index(values: Any, index: dict[Any, int], new: list[Any]) -> array:
    """``values`` as their indexes in ``index``, which takes the values it
    lacks (listed in ``new``, sorted where they sort, in the order of their
    index)."""
    fresh = set(values).difference(index)
    try:
        ordered = sorted(fresh)  # (the same order in every run)
    except TypeError:
        ordered = list(fresh)
    for value in ordered:
        index[value] = len(index)
    new.extend(ordered)
    return array("I", map(index.__getitem__, values))


def _read_exact(fd: int, n: int) -> bytes | None:
    parts = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            return None
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _write_all(fd: int, data: bytes) -> None:
    with memoryview(data) as view:
        while view:
            view = view[os.write(fd, view) :]


def _serve(reader: TypedReader, slots: mmap.mmap, base: int, fd_in: int, fd_out: int) -> None:
    """(a worker) Decode the batches the reader hands over, until it is killed
    or gone."""
    packer = _Packer(reader)
    while True:
        head = _read_exact(fd_in, _HEADER.size)
        if head is None:
            return  # the reader is gone
        slot, length = _HEADER.unpack(head)
        at = base + slot * SLOT_BYTES
        out = packer.batch(slots[at : at + length])
        _write_all(fd_out, _LENGTH.pack(len(out)) + out)


# -- in the reader ---------------------------------------------------------------------------
class Farm:
    """The workers of one trace, and the results taken back in order."""

    def __init__(self, reader: TypedReader, workers: int) -> None:
        from gputui.tracefile.typed import ShapeArgs

        self.shape_args = ShapeArgs
        self.reader = reader
        self.n = workers
        self.slots = mmap.mmap(-1, workers * SLOTS * SLOT_BYTES)
        self.pids: list[int] = []
        self.to: list[int] = []
        self.back: list[int] = []
        self.inbox = bytearray(1 << 20)  # (the results are read into it)
        self.seq = 0  # batches handed out
        self.taken = 0  # results taken back
        #: what comes next, in the file's order: a batch handed out (None), or
        #: events the reader decoded itself, added where their place comes
        self.order: deque[list[Any] | None] = deque()
        self.later: Callable[[list[Any]], None] | None = None  # (what takes those)
        # per worker: the names and shape arguments it has sent, by its index
        self.names: list[list[str]] = [[] for _ in range(workers)]
        self.tids: list[list[int]] = [[] for _ in range(workers)]
        self.shapes: list[list[Any]] = [[NO_ARGS] for _ in range(workers)]
        self.threads: list[list[Any]] = [[] for _ in range(workers)]
        try:
            for w in range(workers):
                self._fork(w)
        except OSError:
            self.kill()
            raise FarmFailed("cannot start the workers") from None

    def _fork(self, w: int) -> None:
        down_r, down_w = os.pipe()
        up_r, up_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the reader's code
            code = 1
            try:
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.close(down_w)
                os.close(up_r)
                for fd in (*self.to, *self.back):
                    os.close(fd)
                _serve(self.reader, self.slots, w * SLOTS * SLOT_BYTES, down_r, up_w)
                code = 0
            finally:
                os._exit(code)
        os.close(down_r)
        os.close(up_w)
        self.pids.append(pid)
        self.to.append(down_w)
        self.back.append(up_r)

    def submit(self, text: memoryview) -> bool:
        """Hand a batch (the text of a JSON array of events) to the next
        worker; False where it is too large for a slot (the reader reads it,
        after :meth:`drain`)."""
        length = len(text)
        if length > SLOT_BYTES:
            return False
        while self.seq - self.taken >= self.n * SLOTS:
            self._take()  # (the oldest in the slot this batch goes into)
        seq = self.seq
        w = seq % self.n
        slot = (seq // self.n) % SLOTS
        at = (w * SLOTS + slot) * SLOT_BYTES
        self.slots[at : at + length] = text
        try:
            _write_all(self.to[w], _HEADER.pack(slot, length))
        except OSError:
            raise FarmFailed("a worker is gone") from None
        self.seq = seq + 1
        self.order.append(None)
        return True

    def add(self, events: list[Any], add: Callable[[list[Any]], None]) -> None:
        """Have ``add`` take ``events`` (decoded by the reader: an element
        the stream read alone) after the batches handed out before them,
        without waiting for those."""
        if self.order:
            self.order.append(events)
            self.later = add
        else:
            add(events)

    def drain(self) -> None:
        """Take back every batch handed out, and the events between them."""
        while self.order:
            self._take()

    def finish(self) -> None:
        """Take back every batch, then stop the workers."""
        try:
            self.drain()
        finally:
            self.kill()

    def kill(self) -> None:
        """Stop the workers at once (idempotent)."""
        for pid in self.pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for pid in self.pids:
            with contextlib.suppress(OSError):
                os.waitpid(pid, 0)
        for fd in (*self.to, *self.back):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.pids, self.to, self.back = [], [], []
        with contextlib.suppress(BufferError, ValueError):
            self.slots.close()

    def _receive(self, w: int) -> Any:
        """The next result of worker ``w``, read into one reused buffer (a new
        one per result would leave the heap in pieces)."""
        fd = self.back[w]
        poll = select.poll()
        poll.register(fd, select.POLLIN)
        if not poll.poll(RESULT_TIMEOUT_S * 1000):
            raise FarmFailed("a worker did not answer")
        head = _read_exact(fd, _LENGTH.size)
        if head is None:
            raise FarmFailed("a worker is gone")
        length = _LENGTH.unpack(head)[0]
        if len(self.inbox) < length:
            self.inbox = bytearray(max(length, 2 * len(self.inbox)))
        with memoryview(self.inbox) as view:
            got = 0
            while got < length:
                k = os.readv(fd, [view[got:length]])
                if not k:
                    raise FarmFailed("a worker is gone")
                got += k
            return marshal.loads(view[:length])

    def _take(self) -> None:
        """Take back the oldest batch's result into the reader's timeline and op
        rows (or the events that come before it)."""
        events = self.order.popleft()
        while events is not None:
            if self.later is not None:
                self.later(events)
            if not self.order:
                return
            events = self.order.popleft()
        w = self.taken % self.n
        result = self._receive(w)
        if result[0] != "ok":
            raise FarmFailed(str(result[1]))
        (_, events, skipped, host_pid, new_names, gpu, runtime, ranges, collectives) = result[:9]
        op_part, launch_to_op, activities, steps, new_tids = result[9:]
        reader = self.reader
        b = reader.builder
        tl = b.timeline
        intern = b.names.setdefault
        names = self.names[w]
        names.extend(intern(name, name) for name in new_names)
        tids = self.tids[w]
        known = b.tids.setdefault
        tids.extend(known(tid, tid) for tid in new_tids)
        for records, cls, target in (
            (gpu, GpuActivity, tl.gpu),
            (runtime, RuntimeCall, tl.runtime),
            (ranges, HostRange, tl.ranges),
        ):
            if records is not None:
                target.extend(_records(records, cls, names, tids, intern))
        if collectives:
            new = tuple.__new__
            tl.collectives.extend(new(Collective, c) for c in collectives)
        tl.events += events
        tl.skipped += skipped
        if b.host_pid is None:
            b.host_pid = host_pid
        ops = reader.ops
        if op_part is not None:
            self._ops(w, op_part)
        ops.launch_to_op.update(launch_to_op)
        ops.activities.extend(activities)
        ops.steps.extend(steps)
        self.taken += 1

    def _ops(self, w: int, part: Any) -> None:
        tids, new_threads, (starts, ends), op_names, links, sources, new_shapes = part
        reader = self.reader
        shapes = self.shapes[w]
        for raw in new_shapes:
            shape = reader.shapes.get(raw)
            if shape is None:
                shape = reader.shapes[raw] = self.shape_args(raw)
            shapes.append(shape)
        threads = self.threads[w]
        known = reader.threads.setdefault
        threads.extend(known(key, key) for key in new_threads)
        table = reader.ops.ops
        table.tid.extend(map(threads.__getitem__, memoryview(tids).cast("I")))
        if type(table.start) is array and type(starts) is bytes and type(ends) is bytes:
            table.start.frombytes(starts)
            table.end.frombytes(ends)
        else:  # a time beyond 64 bits, here or there: the columns become lists
            table._widen()
            table.start.extend(_times(starts))
            table.end.extend(_times(ends))
        table.name.extend(map(self.names[w].__getitem__, memoryview(op_names).cast("I")))
        table.link.extend(links)
        if type(sources) is bytes:
            table.source.extend(map(shapes.__getitem__, memoryview(sources).cast("I")))
        else:
            table.source.extend(s if type(s) is not int else shapes[s] for s in sources)


def _times(got: Any) -> list[Any]:
    return memoryview(got).cast("q").tolist() if type(got) is bytes else got


def _records(records: Any, cls: type, names: list[str], tids: list[int], intern: Any) -> Any:
    """The records a worker sent (columns, or plain tuples), as ``cls``: names
    and thread ids by their index in the worker's tables (``names``, ``tids``)."""
    new = tuple.__new__
    if type(records) is list:  # plain tuples: their names as text
        at = _LAYOUTS[cls].index("n")
        out: list[Any] = []
        for r in records:
            name = r[at]
            out.append(new(cls, (*r[:at], intern(name, name), *r[at + 1 :])))
        return out
    columns: list[Any] = []
    kinds = KINDS
    for code, got in zip(_LAYOUTS[cls], records, strict=True):
        if code == "q":
            columns.append(memoryview(got).cast("q"))
        elif code == "n":
            columns.append(map(names.__getitem__, memoryview(got).cast("I")))
        elif code == "v":
            columns.append(map(tids.__getitem__, memoryview(got).cast("I")))
        else:
            columns.append(map(kinds.__getitem__, got))
    return map(new, repeat(cls), zip(*columns, strict=True))
