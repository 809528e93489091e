"""The events of a trace decoded into typed Structs (msgspec) that hold only the
fields the analysis reads, then turned into the same timeline records and op
rows as :mod:`gputui.tracefile.builder` and :class:`ChromeTraceOps` make of the
standard decoder's dicts.

Only ordinary values are typed: a string where a number belongs, a ``null``, a
boolean id, a number out of range, an event that is not an object, anything the
strict decoder refuses, sends the whole batch back to the standard decoder and
the dict path, which reads it as before.  So a typed batch is one whose every
field has the one type the fast path is written for, and the two paths cannot
disagree on anything else.

An op's arguments beyond its ids (``Input Dims``, ``Input type``, ``Concrete
Inputs``, ``flops``: what the roofline and the MFU read) stay raw JSON, copied
out of the batch, and are decoded only for the ops that end up in a row.
"""

from __future__ import annotations

import json
from math import ceil, floor
from typing import Any

import msgspec
from msgspec import UNSET, Raw, UnsetType, field

from gputui.trace.op_rows import (
    _LAUNCH_CATS,
    _STEP_CATS,
    GPU_ACTIVITIES,
    GPU_MEMCPY,
    MAX_TRACE_US,
    NO_ARGS,
    SHAPES_PROBE_OPS,
    ChromeTraceOps,
    off_device,
    thread_key,
)
from gputui.trace.timeline import (
    DRIVER,
    GPU_OTHER,
    HOST_OTHER,
    MEMCPY,
    RUNTIME,
    SYNC_NAMES,
    GpuActivity,
    HostRange,
    RuntimeCall,
    as_int,
    collective_of,
)
from gputui.tracefile import categories
from gputui.tracefile.builder import (
    GPU_KINDS,
    HOST_CATS,
    HOST_KINDS,
    HUGE_US,
    RUNTIME_CATS,
    Builder,
)
from gputui.tracefile.categories import DECODER as CATEGORY_DECODER
from gputui.tracefile.categories import SHAPED_DECODER, ByCategory, MessageArgs

_EMPTY = Raw()


class Args(MessageArgs):
    """The arguments of an event that the analysis reads (a communication
    kernel's message among them)."""

    correlation: int | UnsetType = UNSET
    stream: int | UnsetType = UNSET
    device: int | UnsetType = UNSET
    external_id: int | UnsetType = field(name="External id", default=UNSET)
    external_id_lower: int | UnsetType = field(name="external id", default=UNSET)
    input_dims: Raw = field(name="Input Dims", default=_EMPTY)
    input_type: Raw = field(name="Input type", default=_EMPTY)
    concrete_inputs: Raw = field(name="Concrete Inputs", default=_EMPTY)
    flops: Raw = _EMPTY


class Event(msgspec.Struct, gc=False):
    """One trace event: the fields the analysis reads, nothing else."""

    cat: str | UnsetType = UNSET
    name: str | UnsetType = UNSET
    ts: int | float | UnsetType = UNSET
    dur: int | float | UnsetType = UNSET
    pid: Any = None
    tid: Any = None
    args: Args | None = None


_DECODER = msgspec.json.Decoder(list[Event])


class ShapeArgs:
    """An op's shape arguments as raw JSON, decoded when a row needs them (the
    ``args`` mapping :func:`gputui.trace.op_rows._trace_details` reads).  Ops
    with the same raw arguments share one (:meth:`TypedReader._add_op`): a
    training trace repeats a few hundred shapes over every step, and the op
    rows decode and estimate each shared one once."""

    __slots__ = ("raw",)

    _KEYS = ("Input Dims", "Input type", "Concrete Inputs", "flops")

    def __init__(self, raw: bytes) -> None:
        #: the four arguments' JSON (each empty where absent), joined by a NUL
        #: byte, which JSON text never holds: the one key the ops share it by
        self.raw = raw

    def get(self, key: str, default: Any = None) -> Any:
        try:
            raw = self.raw.split(b"\0")[self._KEYS.index(key)]
        except ValueError:
            return default
        return json.loads(raw) if raw else default


_JOIN = b"\0".join  # ShapeArgs' key: one bytes object, not four and a tuple

#: batches the by-category decoder may refuse before the reader stops trying it
#: (a trace with other categories, or odd values, is read event by event)
CATEGORY_MISSES = 4


class TypedReader:
    """Decodes batches of events (the text of a JSON array) into records; a batch
    it cannot type is left to the dict path (:meth:`batch` returns False).

    A batch is first offered to the by-category path
    (:mod:`gputui.tracefile.categories`: with the ops' shape arguments until the
    op rows give up, as on a trace recorded without shapes), then to the
    per-event one."""

    def __init__(self, builder: Builder, ops: ChromeTraceOps) -> None:
        self.builder = builder
        self.ops = ops
        self.by_category: ByCategory | None = ByCategory(builder)
        self.misses = 0
        #: the raw shape arguments seen, each once; the thread keys of the ops
        self.shapes: dict[bytes, ShapeArgs] = {}
        self.threads: dict[Any, Any] = {}

    def batch(self, text: memoryview | bytes) -> bool:
        if self.by_category is not None:
            shaped = not self.ops.given_up
            try:
                events = (SHAPED_DECODER if shaped else CATEGORY_DECODER).decode(text)
                if self.by_category.take(events):
                    if shaped:
                        self._op_rows_by_category(events)
                    return True
            except msgspec.ValidationError:
                self.misses += 1
                if self.misses >= CATEGORY_MISSES:
                    self.by_category = None
            except msgspec.DecodeError:
                return False  # not JSON: neither decoder reads it
        try:
            events = _DECODER.decode(text)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return False
        self._records(events)
        if not self.ops.given_up:
            self._op_rows(events)
        return True

    def _records(self, events: list[Event]) -> None:
        """What :meth:`Builder.add` does with the same events as dicts."""
        b = self.builder
        tl = b.timeline
        names = b.names
        thread = b.thread
        tids = b.tids.setdefault
        gpu_append = tl.gpu.append
        runtime_append = tl.runtime.append
        range_append = tl.ranges.append
        new = tuple.__new__
        gpu_kinds, host_kinds, runtime_cats = GPU_KINDS, HOST_KINDS, RUNTIME_CATS
        host_cats = HOST_CATS
        sync_names = SYNC_NAMES
        unset = UNSET
        huge = HUGE_US
        skipped = 0
        host_pid = b.host_pid
        for ev in events:
            dur = ev.dur
            cat = ev.cat
            if dur is unset or cat is unset or cat == "Trace":
                continue
            ts = ev.ts
            if ts is unset or not -huge < ts < huge or not -huge < dur < huge:
                skipped += 1
                continue
            name = ev.name
            if name is unset:
                name = ""
            name = names.setdefault(name, name)
            args = ev.args
            corr: Any
            stream: Any
            ext: Any
            device: Any
            if args is None:
                corr = stream = ext = -1
                device = unset
            else:
                corr = args.correlation
                if corr is unset:
                    corr = -1
                stream = args.stream
                if stream is unset:
                    stream = -1
                ext = args.external_id
                if ext is unset:
                    ext = args.external_id_lower
                    if ext is unset:
                        ext = -1
                device = args.device
            start = ceil(ts)
            end = floor(ts + dur)
            if end < start:
                end = start
            if (stream >= 0 and cat not in host_cats and cat.lower() not in host_cats) or (
                name in sync_names
            ):
                if device is unset:
                    device = as_int(ev.pid, 0)
                kind = gpu_kinds.get(cat) or gpu_kinds.get(cat.lower(), GPU_OTHER)
                gpu_append(
                    new(
                        GpuActivity,
                        (start, end, round(dur * 1000), kind, name, stream, device, corr, ext),
                    )
                )
                if args is not None and args.collective is not unset:
                    c = collective_of(
                        start,
                        round(dur * 1000),
                        args.collective,
                        args.in_nelems,
                        args.out_nelems,
                        args.dtype,
                        args.group_size,
                        args.in_split,
                    )
                    if c is not None:
                        tl.collectives.append(c)
            elif corr >= 0:
                kind = RUNTIME if cat in runtime_cats or cat.lower() in runtime_cats else DRIVER
                tid = ev.tid
                tid = tids(tid, tid) if type(tid) is int else thread(tid)
                runtime_append(new(RuntimeCall, (start, end, name, tid, corr, ext, kind)))
            else:
                kind = host_kinds.get(cat) or host_kinds.get(cat.lower(), HOST_OTHER)
                tid = ev.tid
                tid = tids(tid, tid) if type(tid) is int else thread(tid)
                range_append(new(HostRange, (start, end, name, tid, kind, ext)))
                if host_pid is None and type(ev.pid) is int:
                    host_pid = ev.pid
        b.host_pid = host_pid
        tl.events += len(events)
        tl.skipped += skipped

    def _add_op(self, ev: Any, name: str, start: int, end: int, args: Any) -> bool:
        """Append one op to the op rows' list (times in ns); False where the op
        rows give up instead (no shapes in the first ops of the trace).  Ops with
        the same raw shape arguments share one :class:`ShapeArgs`, and ops of one
        thread one thread key."""
        ops = self.ops
        source: Any
        if len(args.input_dims) > 0:
            ops.has_shapes = True
            key = _JOIN((args.input_dims, args.input_type, args.concrete_inputs, args.flops))
            source = self.shapes.get(key)
            if source is None:
                source = self.shapes[key] = ShapeArgs(key)
        elif not ops.has_shapes and len(ops.ops) >= SHAPES_PROBE_OPS:
            ops.give_up()
            return False
        else:
            source = NO_ARGS
        pair = (ev.pid, ev.tid)
        threads = self.threads
        try:
            thread = threads[pair]
        except KeyError:
            thread = threads[pair] = pair
        except TypeError:  # a list or an object: thread_key names it by its text
            thread = thread_key(*pair)
        if name:
            name = self.builder.names.setdefault(name, name)  # one string per name
        ops.ops.append(thread, start, end, name, args.external_id, source)
        return True

    def _op_rows(self, events: list[Event]) -> None:
        """What :meth:`ChromeTraceOps.add` does with the same events as dicts
        (``_ns`` inlined: a time here is an int or a float, never a bool)."""
        ops = self.ops
        launch_to_op, activities, steps = ops.launch_to_op, ops.activities, ops.steps
        unset = UNSET
        big = MAX_TRACE_US
        step_cats, launch_cats, gpu_cats = _STEP_CATS, _LAUNCH_CATS, GPU_ACTIVITIES
        ts: Any  # a number wherever ``timed`` holds
        dur: Any
        for ev in events:
            cat = ev.cat
            if cat is unset:
                continue
            ts, dur = ev.ts, ev.dur
            timed = ts is not unset and dur is not unset and -big < ts < big and -big < dur < big
            if cat in step_cats and timed:
                name = ev.name
                if name is not unset and name.startswith("ProfilerStep#"):
                    start = round(ts * 1000.0)
                    steps.append((start, start + round(dur * 1000.0)))
            args = ev.args
            if args is None:
                continue
            if cat == "cpu_op":
                ext = args.external_id
                if not timed or ext is unset:
                    continue  # (an untimed op: also NaN and infinities)
                name = ev.name
                start = round(ts * 1000.0)
                end = start + round(dur * 1000.0)
                if not self._add_op(ev, "" if name is unset else name, start, end, args):
                    return
            elif cat in launch_cats:
                corr, ext = args.correlation, args.external_id
                if corr is not unset and ext is not unset:
                    launch_to_op[corr] = ext
            elif cat in gpu_cats and dur is not unset and -big < dur < big:
                if cat == GPU_MEMCPY and off_device(cat, "" if ev.name is unset else ev.name):
                    continue
                corr, ext = args.correlation, args.external_id
                activities.append(
                    (
                        None if corr is unset else corr,
                        None if ext is unset else ext,
                        round(dur * 1000.0),
                    )
                )

    def _op_rows_by_category(self, events: list[Any]) -> None:
        """:meth:`_op_rows` for a batch the by-category path read (a trace with
        shapes): each event's class says what the op rows read of it."""
        ops = self.ops
        launch_to_op, activities, steps = ops.launch_to_op, ops.activities, ops.steps
        unset = UNSET
        big = MAX_TRACE_US
        step_cat, launch, device = categories.STEP_CAT, categories.LAUNCH, categories.DEVICE
        memcpy = MEMCPY
        timed = frozenset({categories.OP_ROW, step_cat})  # (built once, not per event)
        for ev in events:
            what = ev.op
            if not what:  # NO_OP: most events of a trace with stacks
                continue
            if what in timed:
                ts, dur = ev.ts, ev.dur
                if not (-big < ts < big and -big < dur < big):
                    continue  # (a time out of the op rows' bounds)
                name = ev.name
                start = round(ts * 1000.0)
                end = start + round(dur * 1000.0)
                if name.startswith("ProfilerStep#"):
                    steps.append((start, end))
                if what == step_cat:
                    continue
                if not self._add_op(ev, name, start, end, ev.args):
                    return
            elif what == launch:
                args = ev.args
                ext = args.external_id
                if ext is not unset:
                    launch_to_op[args.correlation] = ext
            elif what == device:
                dur = ev.dur
                if -big < dur < big and not (ev.kind == memcpy and off_device(GPU_MEMCPY, ev.name)):
                    args = ev.args
                    corr, ext = args.correlation, args.external_id
                    activities.append(
                        (
                            None if corr is unset else corr,
                            None if ext is unset else ext,
                            round(dur * 1000.0),
                        )
                    )
