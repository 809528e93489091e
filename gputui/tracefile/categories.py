"""The events of a trace decoded by their category: the typed reader's fast path
(:mod:`gputui.tracefile.typed`), for the batches of a trace without shapes.

msgspec picks each event's Struct by its ``cat`` (a tagged union) and checks, as
it decodes, what the general reading (:meth:`TypedReader._records`) decides
event by event: a kernel, copy or set has a stream, a runtime call a
correlation id, a host op neither; every time is a number within bounds, every
thread id an int; a flow event has no duration.  So each event's category alone
says which record it becomes and of what kind, and the loop that makes the
records does little else.  A batch where one of these does not hold (a
category it does not know, a missing field, an odd value) is refused by the
decoder and read by the general path, which reads anything: both give the same
records in the same order.
"""

from __future__ import annotations

from math import ceil, floor
from typing import Annotated, Any, ClassVar, Union

import msgspec
from msgspec import UNSET, Meta, Raw, UnsetType, field

from gputui.trace.op_rows import _LAUNCH_CATS, _STEP_CATS, GPU_ACTIVITIES
from gputui.trace.timeline import (
    DRIVER,
    GPU_OTHER,
    HOST_OTHER,
    RUNTIME,
    SYNC_NAMES,
    GpuActivity,
    HostRange,
    RuntimeCall,
    as_int,
    collective_of,
)
from gputui.tracefile.builder import (
    GPU_KINDS,
    HOST_CATS,
    HOST_KINDS,
    HUGE_US,
    RUNTIME_CATS,
    Builder,
)

# -- the values a batch read by category may hold ---------------------------------------
#: a time (µs) the general path reads as one: HUGE_US bounds it
Time = (
    Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)]
    | Annotated[float, Meta(gt=-HUGE_US, lt=HUGE_US)]
)
OnStream = Annotated[int, Meta(ge=0)]
NoStream = Annotated[int, Meta(lt=0)]
Correlated = Annotated[int, Meta(ge=0)]
Uncorrelated = Annotated[int, Meta(lt=0)]
_NO_RAW = Raw()


class _HostArgs(msgspec.Struct, gc=False, frozen=True):
    """A host op's or annotation's arguments: no correlation id (else it is a
    runtime call)."""

    correlation: Uncorrelated | UnsetType = UNSET
    external_id: int = field(name="External id", default=-1)
    # the lower-case spelling counts only where the other is missing: not here
    external_id_lower: None = field(name="external id", default=None)


class _OtherArgs(_HostArgs, frozen=True):
    """The arguments of an event of another category read as a host range: no
    stream either (else it is GPU activity)."""

    stream: NoStream | UnsetType = UNSET


class _CallArgs(msgspec.Struct, gc=False):
    correlation: Correlated
    # UNSET where missing: the op rows tell a missing id from any value
    external_id: int | UnsetType = field(name="External id", default=UNSET)
    external_id_lower: None = field(name="external id", default=None)


class MessageArgs(msgspec.Struct, gc=False):
    """A communication kernel's message in its arguments, of any type
    (:func:`gputui.trace.timeline.collective_of` reads what it can)."""

    collective: Any = field(name="Collective name", default=UNSET)
    in_nelems: Any = field(name="In msg nelems", default=UNSET)
    out_nelems: Any = field(name="Out msg nelems", default=UNSET)
    dtype: Any = UNSET
    group_size: Any = field(name="Group size", default=UNSET)
    in_split: Any = field(name="In split size", default=UNSET)


class _GpuArgs(MessageArgs, kw_only=True):
    stream: OnStream
    correlation: int | UnsetType = UNSET
    device: int | UnsetType = UNSET
    external_id: int | UnsetType = field(name="External id", default=UNSET)
    external_id_lower: None = field(name="external id", default=None)


class _OpArgs(msgspec.Struct, gc=False, frozen=True, kw_only=True):
    """A ``cpu_op``'s arguments in a trace with shapes: its id (always written by
    torch: a batch with an op without one takes the general path) and its shape
    arguments, raw (:class:`gputui.tracefile.typed.ShapeArgs`)."""

    correlation: Uncorrelated | UnsetType = UNSET
    external_id: int = field(name="External id")
    external_id_lower: None = field(name="external id", default=None)
    input_dims: Raw = field(name="Input Dims", default=_NO_RAW)
    input_type: Raw = field(name="Input type", default=_NO_RAW)
    concrete_inputs: Raw = field(name="Concrete Inputs", default=_NO_RAW)
    flops: Raw = _NO_RAW


_NO_HOST_ARGS = _HostArgs()
_NO_OTHER_ARGS = _OtherArgs()


def _no_host_args() -> _HostArgs:
    return _NO_HOST_ARGS


def _no_other_args() -> _OtherArgs:
    return _NO_OTHER_ARGS


#: what a category's events become
GPU, CALL, RANGE, SKIP = range(4)
#: what the op rows read of them (:class:`~gputui.trace.op_rows.ChromeTraceOps`):
#: nothing (0: false, as the op rows' loop tests it), an op (whose name may be
#: a step mark), a step mark's category, a launch call, GPU work
NO_OP, OP_ROW, STEP_CAT, LAUNCH, DEVICE = range(5)


class _Event(msgspec.Struct, gc=False, tag_field="cat"):
    role: ClassVar[int]
    kind: ClassVar[str]
    op: ClassVar[int]


class _Timed(_Event, kw_only=True):
    name: str
    ts: Time
    dur: Time
    pid: Any = None


class _Gpu(_Timed, kw_only=True):
    args: _GpuArgs


class _Call(_Timed, kw_only=True):
    tid: int
    args: _CallArgs


class _Host(_Timed, kw_only=True):
    tid: int
    args: _HostArgs = field(default_factory=_no_host_args)


class _Other(_Timed, kw_only=True):
    tid: int
    args: _OtherArgs = field(default_factory=_no_other_args)


class _ShapedOp(_Timed, kw_only=True):
    """A ``cpu_op`` of a trace with shapes (its arguments are not optional)."""

    tid: int
    args: _OpArgs


class _Flow(_Event):
    """An event HTA does not read (flows, instants): no duration."""

    dur: None = None


def _lower(table: dict[str, str], cat: str, default: str) -> str:
    return table.get(cat) or table.get(cat.lower(), default)


def _category(cat: str, shaped: bool = False) -> type[_Event]:
    """The Struct of one category's events, with what they become (``shaped``:
    as the op rows of a trace with shapes read them)."""
    host = cat in HOST_CATS or cat.lower() in HOST_CATS
    if cat == "Trace":  # the profiler's own span (any fields)
        base: type[_Event] = _Event
        role, kind = SKIP, ""
    elif cat in ("ac2g", "fwdbwd", "cpu_instant_event"):
        base, role, kind = _Flow, SKIP, ""
    elif cat in RUNTIME_CATS or cat.lower() in RUNTIME_CATS:
        base, role, kind = _Call, CALL, RUNTIME
    elif cat == "cuda_driver":
        base, role, kind = _Call, CALL, DRIVER
    elif host:
        base, role, kind = _Host, RANGE, _lower(HOST_KINDS, cat, HOST_OTHER)
    elif _lower(GPU_KINDS, cat, ""):
        base, role, kind = _Gpu, GPU, _lower(GPU_KINDS, cat, GPU_OTHER)
    else:
        base, role, kind = _Other, RANGE, _lower(HOST_KINDS, cat, HOST_OTHER)
    if cat == "cpu_op":
        op = OP_ROW
        if shaped:
            base = _ShapedOp
    elif cat in _STEP_CATS:
        op = STEP_CAT
    elif cat in _LAUNCH_CATS:
        op = LAUNCH
    elif cat in GPU_ACTIVITIES:
        op = DEVICE
    else:
        op = NO_OP
    name = "_" + "".join(c if c.isalnum() else "_" for c in cat)
    attrs = {"role": role, "kind": kind, "op": op}
    return type(name, (base,), attrs, tag=cat)  # type: ignore[call-arg]


#: the categories torch.profiler writes (an event of another one sends its batch
#: to the per-event path)
CATEGORIES = (
    *GPU_KINDS,
    *HOST_CATS,
    "gpu_user_annotation",
    "overhead",
    "Trace",
    "ac2g",
    "fwdbwd",
    "cpu_instant_event",
)
_CLASSES = tuple(_category(cat) for cat in dict.fromkeys(CATEGORIES))
DECODER = msgspec.json.Decoder(list[Union[_CLASSES]])  # type: ignore[valid-type]  # noqa: UP007
#: the same for a trace with shapes: its ops' shape arguments kept raw
_SHAPED_CLASSES = tuple(_category(cat, shaped=True) for cat in dict.fromkeys(CATEGORIES))
SHAPED_DECODER = msgspec.json.Decoder(list[Union[_SHAPED_CLASSES]])  # type: ignore[valid-type]  # noqa: UP007


class ByCategory:
    """Turns decoded batches into records, appended to the builder's timeline."""

    def __init__(self, builder: Builder) -> None:
        self.builder = builder

    def take(self, events: list[Any]) -> bool:
        """Append the records of ``events`` (decoded by :data:`DECODER`) to the
        builder's timeline; False, with nothing appended, where a record needs
        the general path (a host event named as a device-wide synchronization).
        Locals, not attributes, in the loop: a large trace has millions of
        events."""
        b = self.builder
        tl = b.timeline
        gpu, runtime, ranges = tl.gpu, tl.runtime, tl.ranges
        n_gpu, n_runtime, n_ranges = len(gpu), len(runtime), len(ranges)
        collectives = tl.collectives
        n_collectives = len(collectives)
        gpu_append, runtime_append, range_append = gpu.append, runtime.append, ranges.append
        intern = b.names.setdefault
        tids = b.tids.setdefault  # (one int per thread id: Builder.tids)
        new = tuple.__new__  # a NamedTuple without its Python-level __new__
        sync_names = SYNC_NAMES
        unset = UNSET
        host_pid = b.host_pid
        on_host, on_gpu, call = RANGE, GPU, CALL
        for ev in events:
            role = ev.role
            if role == on_host:
                name = ev.name
                if name in sync_names:
                    break
                ts = ev.ts
                start = ceil(ts)
                end = floor(ts + ev.dur)
                if end < start:
                    end = start
                name = intern(name, name)
                tid = tids(ev.tid, ev.tid)
                range_append(new(HostRange, (start, end, name, tid, ev.kind, ev.args.external_id)))
                if host_pid is None and type(ev.pid) is int:
                    host_pid = ev.pid
            elif role == call:
                name = ev.name
                if name in sync_names:
                    break
                ts = ev.ts
                start = ceil(ts)
                end = floor(ts + ev.dur)
                if end < start:
                    end = start
                name = intern(name, name)
                a = ev.args
                ext = a.external_id
                if ext is unset:
                    ext = -1
                tid = tids(ev.tid, ev.tid)
                corr = a.correlation
                runtime_append(new(RuntimeCall, (start, end, name, tid, corr, ext, ev.kind)))
            elif role == on_gpu:
                ts = ev.ts
                dur = ev.dur
                start = ceil(ts)
                end = floor(ts + dur)
                if end < start:
                    end = start
                name = ev.name
                name = intern(name, name)
                a = ev.args
                device = a.device
                if device is unset:
                    device = as_int(ev.pid, 0)
                corr = a.correlation
                if corr is unset:
                    corr = -1
                ext = a.external_id
                if ext is unset:
                    ext = -1
                gpu_append(
                    new(
                        GpuActivity,
                        (start, end, round(dur * 1000), ev.kind, name, a.stream, device, corr, ext),
                    )
                )
                if a.collective is not unset:
                    c = collective_of(
                        start,
                        round(dur * 1000),
                        a.collective,
                        a.in_nelems,
                        a.out_nelems,
                        a.dtype,
                        a.group_size,
                        a.in_split,
                    )
                    if c is not None:
                        collectives.append(c)
        else:
            b.host_pid = host_pid
            tl.events += len(events)
            return True
        del gpu[n_gpu:], runtime[n_runtime:], ranges[n_ranges:], collectives[n_collectives:]
        return False
