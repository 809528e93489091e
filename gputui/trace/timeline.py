"""One rank's profiler timeline as plain values, and the interval arithmetic over
it (standard library only: the hook imports this inside the training job).

Two readers fill a :class:`Timeline`: :mod:`gputui.tracefile.reader` from a
Chrome trace (``export_chrome_trace``, ``tensorboard_trace_handler``), and the
hook from torch's raw kineto events.  :mod:`gputui.trace.trace_metrics`
computes the metrics over it.

Times are whole microseconds, rounded the way Holistic Trace Analysis (HTA)
rounds nanosecond-precision traces: the start up (ceil), the end down (floor).
Doing the same makes our idle and compute times equal to HTA's to the
microsecond.  HTA keeps an end that rounds to before its start (a memset of
0.8 µs starting at x.1 µs becomes [x+1, x]) as a negative duration, which is
what trips its assertion on some valid traces; here such an activity has zero
length.  ``dur_ns`` keeps each GPU activity's exact duration for kernel tables.

The split between GPU and host follows HTA: a GPU activity has a stream and a
correlation id (or is a device-wide "Event Sync"/"Context Sync"); host events
with a correlation id are the runtime calls that launched GPU work.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from gputui.protocol.value import ValueBase, value_class

# GPU activity kinds
KERNEL = "kernel"
MEMCPY = "memcpy"
MEMSET = "memset"
SYNC = "sync"
GPU_OTHER = "other"

# host range kinds
OP = "op"  # cpu_op: an ATen op, autograd node, ...
ANNOTATION = "annotation"  # user_annotation: record_function, ProfilerStep#N, DataLoader
GPU_ANNOTATION = "gpu_annotation"  # the same ranges mirrored on the GPU timeline
PYTHON = "python"  # python_function (with_stack)
HOST_OTHER = "other"

# runtime call kinds
RUNTIME = "runtime"  # cuda_runtime: cudaLaunchKernel, cudaMemcpyAsync, ...
DRIVER = "driver"  # cuda_driver: cuLaunchKernel (Triton), ...

#: device-wide synchronisations HTA counts as GPU events whatever their stream
SYNC_NAMES = frozenset({"Event Sync", "Context Sync"})
#: host events of the profiler itself, not of the job
OVERHEAD_NAMES = frozenset({"Activity Buffer Request"})
_RUNTIME_NAME = re.compile(r"^cuda[A-Z]")
_DRIVER_NAME = re.compile(r"^cu[A-Z]")


def infer_activity(name: str, on_gpu: bool) -> str:
    """The activity type of a raw profiler event from a torch whose events have no
    ``activity_type()`` (2.11 has none; 2.13 has it), told from its name: copies
    and fills on the GPU, CUDA runtime and driver calls and the profiler's own
    events on the host; "" when the name does not tell (a kernel or a GPU
    annotation on the GPU, an op or an annotation on the host)."""
    if on_gpu:
        if name.startswith("Memcpy"):
            return "gpu_memcpy"
        if name.startswith("Memset"):
            return "gpu_memset"
        return ""
    if _RUNTIME_NAME.match(name):
        return "cuda_runtime"
    if _DRIVER_NAME.match(name):
        return "cuda_driver"
    if name in OVERHEAD_NAMES:
        return "overhead"
    return "cpu_op"


#: ``RecordScope.USER_SCOPE``: the scope of ``record_function`` ranges and step
#: marks in torch's raw events (the same number from torch 2.4 to 2.13)
USER_SCOPE = 7


def is_user_annotation(ev: Any) -> bool:
    """Whether a raw profiler event is a user annotation (``record_function``,
    ``ProfilerStep#N``): ``is_user_annotation()`` where the event has it, else
    (torch 2.4) its record scope."""
    try:
        return bool(ev.is_user_annotation())
    except AttributeError:
        pass
    scope = getattr(ev, "scope", None)
    try:
        return callable(scope) and scope() == USER_SCOPE
    except Exception:
        return False


STEP_MARK = "ProfilerStep"
_STEP_ID = re.compile(r"ProfilerStep\s*#\s*(\d+)")


class GpuActivity(NamedTuple):
    """A kernel, memcpy, memset or synchronisation on the GPU."""

    start_us: int
    end_us: int
    dur_ns: int
    kind: str  # KERNEL, MEMCPY, MEMSET, SYNC, GPU_OTHER
    name: str
    stream: int  # -1: none (device-wide sync)
    device: int
    correlation: int  # joins it to its launch call; -1: unknown
    external_id: int  # the host op that launched it; -1: unknown


#: bytes an element of each dtype torch's profiler names in a collective's
#: arguments (c10's ScalarType names)
DTYPE_BYTES = {
    "Float": 4,
    "Double": 8,
    "Half": 2,
    "BFloat16": 2,
    "Int": 4,
    "Long": 8,
    "Short": 2,
    "Char": 1,
    "Byte": 1,
    "Bool": 1,
    "UInt16": 2,
    "UInt32": 4,
    "UInt64": 8,
    "Float8_e4m3fn": 1,
    "Float8_e5m2": 1,
    "Float8_e4m3fnuz": 1,
    "Float8_e5m2fnuz": 1,
    "ComplexHalf": 4,
    "ComplexFloat": 8,
    "ComplexDouble": 16,
}
#: the longest collective name and split list kept (a trace's text)
_COLLECTIVE_NAME = 64
_SPLITS = 512


class Collective(NamedTuple):
    """A communication kernel's message, as torch's profiler records it in the
    kernel's arguments (``Collective name``, ``In msg nelems``, ``Out msg
    nelems``, ``dtype``, ``Group size``, ``In split size``)."""

    start_us: int
    dur_ns: int
    name: str  # "allreduce", "all_to_allv", "_allgather_base"...
    in_bytes: int  # -1: unknown
    out_bytes: int
    group: int  # ranks in its group; 0: unknown
    splits: str  # "In split size" as written ("[4, 4]"); "": none


def collective_of(
    start: int, dur_ns: int, name: Any, ins: Any, outs: Any, dtype: Any, group: Any, splits: Any
) -> Collective | None:
    """A GPU activity's :class:`Collective` from its arguments' values, whatever
    their types (every reader of a trace calls this with the same values, so
    all give the same record); None without a collective's name."""
    if type(name) is not str or not name:
        return None
    size = DTYPE_BYTES.get(dtype) if type(dtype) is str else None

    def nbytes(n: Any) -> int:
        return n * size if size is not None and type(n) is int and 0 <= n < 2**50 else -1

    return Collective(
        start,
        dur_ns,
        name[:_COLLECTIVE_NAME],
        nbytes(ins),
        nbytes(outs),
        group if type(group) is int and 0 < group < 2**20 else 0,
        splits if type(splits) is str and len(splits) <= _SPLITS else "",
    )


class RuntimeCall(NamedTuple):
    """A host-side CUDA runtime or driver call (launches, copies, syncs)."""

    start_us: int
    end_us: int
    name: str
    thread: int
    correlation: int
    external_id: int
    kind: str  # RUNTIME, DRIVER


class HostRange(NamedTuple):
    """A host-side op, annotation (``ProfilerStep#N``, DataLoader ``__next__``,
    ``record_function``) or Python function; GPU annotations are kept here too."""

    start_us: int
    end_us: int
    name: str
    thread: int
    kind: str  # OP, ANNOTATION, GPU_ANNOTATION, PYTHON, HOST_OTHER
    external_id: int


@dataclass
class Timeline:
    """Everything one rank recorded.  Lists, not tuples: readers append."""

    gpu: list[GpuActivity] = field(default_factory=list)
    runtime: list[RuntimeCall] = field(default_factory=list)
    ranges: list[HostRange] = field(default_factory=list)
    #: events the reader saw (all phases), and those it could not use
    events: int = 0
    skipped: int = 0
    #: the communication kernels' messages, where the trace records them (in
    #: the order read)
    collectives: list[Collective] = field(default_factory=list)

    def step_ranges(self) -> list[HostRange]:
        """The host-side ``ProfilerStep#N`` ranges, in time order."""
        steps = [
            r
            for r in self.ranges
            if r.kind in (OP, ANNOTATION) and r.name.startswith("ProfilerStep#")
        ]
        steps.sort(key=lambda r: r.start_us)
        return steps


def step_id(name: str) -> int | None:
    """N of ``ProfilerStep#N`` (None for another name)."""
    m = _STEP_ID.search(name)
    return int(m.group(1)) if m else None


def round_us(start_us: float, dur_us: float) -> tuple[int, int]:
    """HTA's rounding of a Chrome trace's float microseconds: start up, end down
    (computed from the unrounded end), never an end before the start."""
    start = math.ceil(start_us)
    end = math.floor(start_us + dur_us)
    return start, end if end > start else start


def round_ns(start_ns: int, dur_ns: int) -> tuple[int, int]:
    """The same rounding from integer nanoseconds (torch's raw events)."""
    start = -(-start_ns // 1000)
    end = (start_ns + dur_ns) // 1000
    return start, end if end > start else start


# -- HTA's kernel types ------------------------------------------------------------------
# Holistic Trace Analysis 0.5.0 (hta/utils/utils.py) types a GPU activity by its name
# alone: communication if it matches ^nccl.*Kernel, memory if ^Memcpy|^Memset|^dma,
# computation unless the name contains Memcpy or Sync anywhere (or starts with
# Memset), else "other".  So a "Stream Sync" is neither computation nor memory.
HTA_COMMUNICATION = "communication"
HTA_MEMORY = "memory"
HTA_COMPUTATION = "computation"
HTA_OTHER = "other"
_HTA_COMM = re.compile(r"^nccl.*Kernel")
_HTA_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_HTA_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")


def hta_kernel_type(name: str) -> str:
    if _HTA_COMM.match(name):
        return HTA_COMMUNICATION
    if _HTA_MEMORY.match(name):
        return HTA_MEMORY
    if not _HTA_NOT_COMPUTE.match(name):
        return HTA_COMPUTATION
    return HTA_OTHER


class KernelTypes:
    """:func:`hta_kernel_type` remembered per name (a trace repeats few names)."""

    def __init__(self) -> None:
        self._known: dict[str, str] = {}

    def __call__(self, name: str) -> str:
        kind = self._known.get(name)
        if kind is None:
            kind = self._known[name] = hta_kernel_type(name)
        return kind


# -- interval arithmetic -----------------------------------------------------------------
Interval = tuple[int, int]


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """The union as sorted, disjoint intervals (touching intervals join)."""
    out: list[Interval] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def length(merged: Iterable[Interval]) -> int:
    return sum(end - start for start, end in merged)


def intersect(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """The intersection of two merged interval lists (merged)."""
    out: list[Interval] = []
    append = out.append
    i = j = 0
    na, nb = len(a), len(b)
    while i < na and j < nb:
        a0, a1 = a[i]
        b0, b1 = b[j]
        lo = a0 if a0 > b0 else b0
        hi = a1 if a1 < b1 else b1
        if hi > lo:
            append((lo, hi))
        if a1 < b1:
            i += 1
        else:
            j += 1
    return out


def subtract(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """``a`` minus ``b``, both merged."""
    out: list[Interval] = []
    append = out.append
    j = 0
    nb = len(b)
    for start, end in a:
        cur = start
        while j < nb and b[j][1] <= cur:
            j += 1
        k = j
        while k < nb:
            b0, b1 = b[k]
            if b0 >= end:
                break
            if b0 > cur:
                append((cur, b0))
            if b1 > cur:
                cur = b1
            if cur >= end:
                break
            k += 1
        if cur < end:
            append((cur, end))
    return out


# -- HTA's analysis window ---------------------------------------------------------------
@value_class
class Window(ValueBase):
    """What HTA keeps of a trace: host events that started before the last
    ``ProfilerStep`` (that step may be cut short by the profiler's stop), and the
    GPU activities those host events launched.  With fewer than two distinct step
    names nothing is dropped."""

    timeline: Timeline
    steps_total: int
    last_step_dropped: bool


def hta_window(timeline: Timeline, include_last_step: bool = False) -> Window:
    """The part of ``timeline`` HTA analyses (``TraceAnalysis`` drops the last
    step by default; ``include_last_profiler_step=True`` keeps it).

    HTA finds the last step among every host-side event whose name contains
    ``ProfilerStep`` -- the GPU-side annotation of the last step too, which
    starts later than its host range when the GPU lags -- and compares starts."""
    step_events = [r for r in timeline.ranges if STEP_MARK in r.name]
    names = {r.name for r in step_events}
    host_steps = len({r.name for r in step_events if r.kind != GPU_ANNOTATION})
    if len(names) < 2:
        return Window(timeline, host_steps, False)
    if include_last_step:
        cutoff = max(r.end_us for r in step_events)

        def keep(start: int) -> bool:
            return start <= cutoff

    else:
        cutoff = max(r.start_us for r in step_events)

        def keep(start: int) -> bool:
            return start < cutoff

    runtime = [r for r in timeline.runtime if keep(r.start_us)]
    ranges = [r for r in timeline.ranges if keep(r.start_us)]
    launched = {r.correlation for r in runtime if r.correlation >= 0}
    gpu = [
        a
        for a in timeline.gpu
        if (a.correlation in launched if a.correlation >= 0 else keep(a.start_us))
    ]
    kept = Timeline(gpu, runtime, ranges, timeline.events, timeline.skipped)
    kept.collectives = [c for c in timeline.collectives if keep(c.start_us)]
    return Window(kept, host_steps, not include_last_step)


def by_stream(activities: Iterable[GpuActivity]) -> Iterator[tuple[int, list[GpuActivity]]]:
    """Activities grouped per stream, each group in start order (stable)."""
    groups: dict[int, list[GpuActivity]] = {}
    for a in activities:
        groups.setdefault(a.stream, []).append(a)
    for stream in sorted(groups):
        items = groups[stream]
        items.sort(key=lambda a: a.start_us)
        yield stream, items


def self_times(
    by_thread: Mapping[Any, list[tuple[int, int, str, bool]]],
) -> dict[str, list[int]]:
    """Per op name ``[calls, self time, inclusive time]`` from host ranges
    ``(start, end, name, is_op)`` grouped by thread (any one time unit): an op's
    self time is its duration less its direct children's.  Ranges that are not
    ops (annotations) take part in the nesting but are not counted.  Sorts each
    thread's list in place."""
    per_name: dict[str, list[int]] = {}
    for items in by_thread.values():
        items.sort(key=lambda it: (it[0], -it[1]))
        child = [0] * len(items)
        stack: list[int] = []
        for idx, (start, end, _name, _op) in enumerate(items):
            while stack and items[stack[-1]][1] <= start:
                stack.pop()
            if stack:
                child[stack[-1]] += end - start
            stack.append(idx)
        for idx, (start, end, name, is_op) in enumerate(items):
            if not is_op:
                continue
            dur = end - start
            row = per_name.get(name)
            if row is None:
                row = per_name[name] = [0, 0, 0]
            row[0] += 1
            row[1] += max(0, dur - child[idx])
            row[2] += dur
    return per_name


def as_int(value: Any, default: int = -1) -> int:
    """``value`` as an int (a trace's or a raw event's id, stream, device), else
    ``default``."""
    if type(value) is int:
        return value
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return default
