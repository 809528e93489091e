"""Per-op rows for the roofline: each op's FLOPs, bytes moved and GPU time, read
from a torch.profiler capture (pure stdlib; the hook may import it).

Two sources, one result:

- a Chrome trace (``prof.export_chrome_trace``, ``tensorboard_trace_handler``):
  CPU ops (``cat: cpu_op``) carry ``Input Dims`` / ``Input type`` / ``Concrete
  Inputs`` when recorded with ``record_shapes``; a GPU activity (``kernel``,
  ``gpu_memcpy``, ``gpu_memset``) is joined to the launch call with the same
  ``correlation``, whose ``External id`` names the CPU op that launched it;
- the raw events of a live profiler (``prof.profiler.kineto_results.events()``,
  what the hook holds right after a capture): CPU ops expose ``shapes()``,
  ``dtypes()``, ``concrete_inputs()``, ``flops()`` and ``correlation_id()``; a GPU
  event's ``linked_correlation_id()`` is the ``correlation_id()`` of its op.

Kernels are launched by the innermost op (``aten::addmm`` under ``aten::linear``,
``cudnn_convolution`` under ``aten::conv2d``), while FLOPs belong to the op that
has a formula.  So each kernel's time goes to the *outermost* op above its
launcher that has a FLOP formula (see ``op_costs.FLOP_OPS``), else to the
launcher itself.  Calls are then summed per (name, input shapes, dtypes).
"""

from __future__ import annotations

import bisect
import re
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from gputui.protocol.op_rows import ESTIMATED, MAX_DIMS, PROFILER, FlopTotals, OpRow
from gputui.trace import op_costs
from gputui.trace.op_costs import Shape
from gputui.trace.timeline import infer_activity, is_user_annotation

#: GPU activities that are work (annotations mirrored on the GPU timeline are not)
GPU_ACTIVITIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "concurrent_kernel"})
#: the category of the GPU's copies
GPU_MEMCPY = "gpu_memcpy"
#: the copies that stay in the GPU's memory ("Memcpy DtoD (Device -> Device)",
#: HIP's "CopyDeviceToDevice")
_ON_DEVICE_COPIES = ("DtoD", "DeviceToDevice")


def off_device(activity: str, name: str) -> bool:
    """Whether a GPU activity is a copy that leaves the GPU's memory: host to
    device, device to host, between GPUs.  The link (PCIe, NVLink) sets its
    time, not the GPU's memory or arithmetic: an op's device time, which the
    roofline sets against those, leaves it out."""
    return activity == GPU_MEMCPY and not any(c in name for c in _ON_DEVICE_COPIES)


_LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver"})
#: the host categories of the profiler's step marks (older torch: cpu_op)
_STEP_CATS = frozenset({"user_annotation", "cpu_op"})
_STEP_MARK = re.compile(r"^(ProfilerStep#\d+|## )")


class OpTable:
    """The ops of a capture, one column per field: a gigabyte trace holds about a
    million of them, and a column of times costs 8 bytes an op where an object
    with its own ints cost about 180.  A time that does not fit 64 bits (or is no
    int) turns both time columns into lists, so any value a trace gives is kept."""

    __slots__ = ("end", "link", "name", "source", "start", "tid")

    def __init__(self) -> None:
        self.tid: list[Any] = []  #: the thread, as :func:`thread_key` gives it
        self.start: Any = array("q")  #: ns
        self.end: Any = array("q")  #: ns
        self.name: list[str] = []
        #: the id its GPU work names (External id in a trace, correlation live)
        self.link: list[Any] = []
        #: the args mapping (trace) or the event (kineto), read on demand; ops of
        #: a typed trace with the same shape arguments share one
        self.source: list[Any] = []

    def __len__(self) -> int:
        return len(self.name)

    def append(self, tid: Any, start: Any, end: Any, name: str, link: Any, source: Any) -> None:
        try:
            self.start.append(start)
        except (OverflowError, TypeError):
            self._widen()
            self.start.append(start)
        try:
            self.end.append(end)
        except (OverflowError, TypeError):
            self._widen()
            self.end.append(end)
        self.tid.append(tid)
        self.name.append(name)
        self.link.append(link)
        self.source.append(source)

    def _widen(self) -> None:
        if isinstance(self.start, array):
            self.start, self.end = list(self.start), list(self.end)

    def take(self, indexes: Iterable[int]) -> OpTable:
        """The ops at ``indexes``, in that order."""
        out = OpTable()
        for i in indexes:
            out.append(
                self.tid[i], self.start[i], self.end[i], self.name[i], self.link[i], self.source[i]
            )
        return out


#: the source of an op recorded without shapes (one for all: nothing to read)
NO_ARGS: Mapping[str, Any] = MappingProxyType({})


def _parents(ops: OpTable) -> Any:
    """Index of each op's enclosing op on the same thread (-1: none), each
    thread's ops taken in start order, the longer first where two start
    together.  Profilers write each thread's ops in that order: one walk in the
    table's order then needs no sort; an op out of order sends the walk over
    each thread's ops sorted (:func:`_in_order`)."""
    parent = _walk(ops)
    return parent if parent is not None else _walk(ops, _in_order(ops))


def _walk(ops: OpTable, order: Iterable[int] | None = None) -> Any:
    """:func:`_parents` over the ops in ``order`` (None: the table's); None
    where an op comes before one it should follow on its thread."""
    starts, ends, tids = ops.start, ops.end, ops.tid
    parent = array("q", [-1]) * len(tids)
    # per thread: its stack of open ops and of their ends, and the start and
    # end of its last op
    threads: dict[Any, list[Any]] = {}
    last_tid: Any = _NOT_YET
    st: list[int] = []
    st_end: list[Any] = []
    prev: list[Any] = []
    if order is None:  # (one pass over the columns, no indexing)
        items: Iterable[tuple[int, Any, Any, Any]] = zip(
            range(len(tids)), tids, starts, ends, strict=True
        )
    else:
        items = ((i, tids[i], starts[i], ends[i]) for i in order)
    for i, tid, start, end in items:
        if tid != last_tid:
            got = threads.get(tid)
            if got is None:
                got = threads[tid] = [[], [], [start, end]]
            st, st_end, prev = got
            last_tid = tid
        ps = prev[0]
        if start < ps or (start == ps and end > prev[1]):
            return None
        prev[0] = start
        prev[1] = end
        while st_end and st_end[-1] <= start:
            st.pop()
            st_end.pop()
        if st:
            parent[i] = st[-1]
        st.append(i)
        st_end.append(end)
    return parent


def _in_order(ops: OpTable) -> Iterator[int]:
    """Each thread's ops in start order, the longer first where two start
    together, else in the table's order (two stable sorts on the ops' own
    times: no key tuple per op)."""
    starts, ends = ops.start, ops.end
    by_thread: dict[Any, list[int]] = {}
    for i, tid in enumerate(ops.tid):
        got = by_thread.get(tid)
        if got is None:
            by_thread[tid] = [i]
        else:
            got.append(i)
    for indexes in by_thread.values():
        indexes.sort(key=ends.__getitem__, reverse=True)  # stable: equal ends keep their order
        indexes.sort(key=starts.__getitem__)
        yield from indexes


def _owner(i: int, names: Sequence[str], parent: Sequence[int]) -> int:
    owner = i
    j = i
    while j >= 0:
        if names[j] in op_costs.FLOP_OPS:
            owner = j
        j = parent[j]
    return owner


def _details_of(source: Any, details: Any, memo: dict[int, Any]) -> Any:
    """An op's details, read from its source once per source: the ops of a
    typed trace with the same raw shape arguments share one source
    (``gputui.tracefile.typed.ShapeArgs``), and the ops without shapes
    :data:`NO_ARGS`; a dict or an event is one op's."""
    key = id(source)  # every source lives as long as its op
    got = memo.get(key)
    if got is None:
        got = memo[key] = details(source)
    return got


def _dims(value: Any) -> tuple[Shape | None, ...]:
    if not isinstance(value, (list, tuple)):
        return ()
    out: list[Shape | None] = []
    for item in value:
        if (
            isinstance(item, (list, tuple))
            and len(item) <= MAX_DIMS
            and all(isinstance(d, int) and not isinstance(d, bool) for d in item)
        ):
            out.append(tuple(item))
        else:
            out.append(None)  # a tensor list, or something else: no shape
    return tuple(out)


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple("" if v is None else str(v) for v in value)


def _no_list_shapes(dims: tuple[Shape | None, ...], types: tuple[str, ...]) -> Any:
    """A tensor list has no one shape: traces write its shapes nested or as an
    empty list, raw events an empty list (which would read as a scalar)."""
    return tuple(
        None if i < len(types) and types[i] == "TensorList" else d for i, d in enumerate(dims)
    )


def _trace_details(args: Mapping[str, Any]) -> Any:
    flops = args.get("flops")
    types = _strings(args.get("Input type"))
    return (
        _no_list_shapes(_dims(args.get("Input Dims")), types),
        types,
        _strings(args.get("Concrete Inputs")),
        flops
        if isinstance(flops, (int, float)) and not isinstance(flops, bool) and flops > 0
        else None,
    )


def _kineto_details(ev: Any) -> Any:
    def call(name: str) -> Any:
        fn = getattr(ev, name, None)
        try:
            return fn() if fn is not None else None
        except Exception:
            return None

    flops = call("flops")
    types = _strings(call("dtypes"))
    return (
        _no_list_shapes(_dims(call("shapes")), types),
        types,
        _strings(call("concrete_inputs")),
        flops if isinstance(flops, (int, float)) and flops > 0 else None,
    )


_BACKWARD_NODE = "autograd::engine::evaluate_function:"
_NOT_YET = object()


def _recomputed(i: int, names: Sequence[str], parent: Sequence[int]) -> bool:
    """Op ``i`` runs a forward op again inside autograd's backward (activation
    checkpointing): it, or an op above it, is a forward-only op
    (``op_costs.FORWARD_OPS``) below a backward node.  Gradient formulas call the
    matrix products themselves (``aten::mm`` under ``MmBackward0``)."""
    forward = False
    j = i
    while j >= 0:
        name = names[j]
        if name.startswith(_BACKWARD_NODE):
            return forward
        if name in op_costs.FORWARD_OPS:
            forward = True
        j = parent[j]
    return False


def flop_totals(ops: OpTable, parent: Sequence[int], details: Any) -> FlopTotals:
    """Model and hardware FLOPs of every outermost matrix product, convolution
    and attention op (see :class:`FlopTotals`)."""
    model = hardware = recomputed = 0.0
    by_dtype: dict[str, float] = {}
    counted = unknown = 0
    memo: dict[int, Any] = {}
    costs: dict[tuple[str, int], Any] = {}  # (name, source) -> model_flops
    names, sources = ops.name, ops.source
    flop_ops = op_costs.MODEL_FLOP_OPS
    for i, name in enumerate(names):
        if name not in flop_ops or _owner(i, names, parent) != i:
            continue
        source = sources[i]
        dims, types, concrete, _recorded = _details_of(source, details, memo)
        key = (name, id(source))
        both = costs.get(key, _NOT_YET)
        if both is _NOT_YET:
            both = costs[key] = op_costs.model_flops(name, dims, types, concrete)
        if both is None:
            unknown += 1
            continue
        counted += 1
        if _recomputed(i, names, parent):
            hardware += both[1]
            recomputed += both[1]
            continue
        model += both[0]
        hardware += both[1]
        fam = op_costs.dtype_family(types) or "other"
        by_dtype[fam] = by_dtype.get(fam, 0.0) + both[0]
    return FlopTotals(
        model=model,
        hardware=hardware,
        by_dtype=tuple(sorted(by_dtype.items(), key=lambda kv: -kv[1])),
        recomputed=recomputed,
        ops=counted,
        unknown=unknown,
    )


def _estimates(name: str, details: Any) -> tuple[Any, float | None, str | None, Any, Any]:
    """An op's row key (name, shapes, dtypes), FLOPs and their source, bytes
    moved and their rule."""
    dims, types, concrete, recorded = details
    flops: float | None
    source: str | None
    if recorded is not None:
        flops, source = float(recorded), PROFILER
    else:
        flops = op_costs.estimate_flops(name, dims, types, concrete)
        source = ESTIMATED if flops is not None else None
    moved, rule = op_costs.estimate_bytes(name, dims, types, concrete)
    return (name, dims, types), flops, source, moved, rule


def _rows(
    ops: OpTable,
    device: Mapping[Any, list[int]],
    details: Any,
    top: int | None,
    parent: Sequence[int] | None = None,
) -> list[OpRow]:
    """Sum device time per owner op, then per (name, shapes, dtypes)."""
    # the op each GPU link names (the last op with it, as a dict of them all
    # would keep), only for the links that have GPU time
    index = {link: i for i, link in enumerate(ops.link) if link in device}
    parent = _parents(ops) if parent is None else parent
    names, sources = ops.name, ops.source
    owned: dict[int, list[int]] = {}  # op index -> [device ns, kernels]
    for link, (ns, count) in device.items():
        i = index.get(link)
        if i is None:
            continue
        slot = owned.setdefault(_owner(i, names, parent), [0, 0])
        slot[0] += ns
        slot[1] += count
    if not device:
        # A CPU-only capture: the ops with a FLOP formula are rows, without GPU time.
        for i, name in enumerate(names):
            if name in op_costs.FLOP_OPS and _owner(i, names, parent) == i:
                owned.setdefault(i, [0, 0])
    groups: dict[tuple[Any, ...], list[Any]] = {}
    memo: dict[int, Any] = {}
    costs: dict[tuple[str, int], Any] = {}  # (name, source) -> the row's estimates
    for i, (ns, count) in owned.items():
        name, source = names[i], sources[i]
        cost_key = (name, id(source))
        got = costs.get(cost_key)
        if got is None:
            got = costs[cost_key] = _estimates(name, _details_of(source, details, memo))
        key, flops, source, moved, rule = got
        g = groups.get(key)
        if g is None:
            groups[key] = [1, ns, count, flops, source, moved, rule]
            continue
        g[0] += 1
        g[1] += ns
        g[2] += count
        g[3] = None if g[3] is None or flops is None else g[3] + flops
        g[5] = None if g[5] is None or moved is None else g[5] + moved
    rows = [
        OpRow(
            name=name,
            input_dims=dims,
            input_types=types,
            calls=g[0],
            device_us=g[1] / 1000.0,
            kernels=g[2],
            flops=g[3],
            flops_source=g[4] if g[3] is not None else None,
            bytes_moved=g[5],
            bytes_rule=g[6],
        )
        for (name, dims, types), g in groups.items()
    ]
    rows.sort(key=lambda r: (-r.device_us, -(r.flops or 0.0), r.name))
    return rows[:top] if top is not None else rows


#: the largest time a trace may give (microseconds): torch before 2.0 wrote
#: events at their Unix time (1.7e15 us in 2023), later ones from a base time;
#: 1e17 us is the year 5138
MAX_TRACE_US = 1e17


def _ns(us: Any) -> int | None:
    if (
        isinstance(us, bool)
        or not isinstance(us, (int, float))
        or not -MAX_TRACE_US < us < MAX_TRACE_US
    ):
        return None  # also NaN and infinities
    return round(us * 1000.0)


#: a trace whose first cpu ops carry no input shapes was recorded without
#: ``record_shapes``: its ops are not kept (no FLOPs or bytes can be estimated)
SHAPES_PROBE_OPS = 10_000


def _key(value: Any) -> Any:
    """A trace's id as a dict key: a list or an object (no id a writer gives) is none."""
    return None if type(value) in (list, dict) else value


def thread_key(pid: Any, tid: Any) -> tuple[Any, Any]:
    """The thread of a trace event, as a dict key (a list or an object as its text)."""
    if type(pid) in (list, dict):
        pid = repr(pid)
    if type(tid) in (list, dict):
        tid = repr(tid)
    return pid, tid


class ChromeTraceOps:
    """Op rows of a Chrome trace fed one list of events at a time (a streaming
    reader calls :meth:`add` for each chunk; :func:`rows_from_chrome_trace` with
    the whole list).  An op's arguments are kept only when they carry shapes."""

    def __init__(self) -> None:
        self.ops = OpTable()
        self.launch_to_op: dict[Any, Any] = {}  # correlation -> External id of the op
        self.activities: list[tuple[Any, Any, int]] = []  # (correlation, External id, ns)
        self.has_shapes = False
        self.given_up = False
        self.steps: list[tuple[int, int]] = []  #: host ``ProfilerStep#N`` ranges (ns)
        self._parent: list[int] | None = None  # of every op, once they are all in

    def add(self, events: Iterable[Any]) -> None:
        if self.given_up:
            return
        ops, launch_to_op, activities = self.ops, self.launch_to_op, self.activities
        for ev in events:
            if not isinstance(ev, dict):
                continue
            cat = ev.get("cat")
            if not isinstance(cat, str):
                continue  # no category of interest (and a list or dict is no set member)
            if cat in _STEP_CATS and str(ev.get("name", "")).startswith("ProfilerStep#"):
                start, dur = _ns(ev.get("ts")), _ns(ev.get("dur"))
                if start is not None and dur is not None:
                    self.steps.append((start, start + dur))
            args = ev.get("args")
            if not isinstance(args, dict):
                continue
            if cat == "cpu_op":
                start, dur = _ns(ev.get("ts")), _ns(ev.get("dur"))
                ext = _key(args.get("External id"))
                if start is None or dur is None or ext is None:
                    continue
                shaped = "Input Dims" in args
                if shaped:
                    self.has_shapes = True
                elif not self.has_shapes and len(ops) >= SHAPES_PROBE_OPS:
                    self.give_up()
                    return
                tid = thread_key(ev.get("pid"), ev.get("tid"))
                name = str(ev.get("name", ""))
                ops.append(tid, start, start + dur, name, ext, args if shaped else NO_ARGS)
            elif cat in _LAUNCH_CATS:
                if "correlation" in args and "External id" in args:
                    corr = _key(args["correlation"])
                    if corr is not None or args["correlation"] is None:
                        launch_to_op[corr] = _key(args["External id"])
            elif cat in GPU_ACTIVITIES:
                dur = _ns(ev.get("dur"))
                if dur is not None and not off_device(cat, str(ev.get("name", ""))):
                    activities.append(
                        (_key(args.get("correlation")), _key(args.get("External id")), dur)
                    )

    def parents(self) -> Sequence[int]:
        """:func:`_parents` of every op (the rows and the totals share it)."""
        if self._parent is None or len(self._parent) != len(self.ops):
            self._parent = _parents(self.ops)
        return self._parent

    def relink(self, links: Mapping[Any, int]) -> None:
        """Link the GPU work to ops by ``links`` (a launch's correlation -> the
        External id of the op enclosing it, -1 for none) alone, not by the ids
        the trace gives: a trace that writes correlation ids there
        (:func:`gputui.trace.links.relink`)."""
        self.launch_to_op = {}  # (the trace's own links go before the new are made)
        self.launch_to_op = {corr: (ext if ext >= 0 else None) for corr, ext in links.items()}
        self.activities = [(corr, None, dur) for corr, _ext, dur in self.activities]

    def give_up(self) -> None:
        """Stop collecting: a trace recorded without shapes has no op rows."""
        self.given_up = True
        self.ops, self.launch_to_op, self.activities = OpTable(), {}, []

    def totals(self) -> FlopTotals | None:
        """The trace's model and hardware FLOPs; None without shapes."""
        if self.given_up or not self.has_shapes:
            return None
        return flop_totals(self.ops, self.parents(), _trace_details)

    def step_totals(self) -> tuple[FlopTotals, int] | None:
        """The FLOPs of the ops that start inside the trace's host steps
        (``ProfilerStep#N``), and how many steps: what one step costs is the
        first over the second.  A trace without step marks is one step (as the
        step breakdown takes it): every op.  None without shapes."""
        if self.given_up or not self.has_shapes:
            return None
        if not self.steps:
            return flop_totals(self.ops, self.parents(), _trace_details), 1
        spans = sorted(self.steps)
        starts = [lo for lo, _hi in spans]

        def inside(t: int) -> bool:
            i = bisect.bisect_right(starts, t) - 1
            return i >= 0 and t < spans[i][1]

        starts_ns = self.ops.start
        if _all_inside(starts_ns, spans):  # every op in a step (the usual schedule)
            return flop_totals(self.ops, self.parents(), _trace_details), len(spans)
        ops = self.ops.take(i for i, start in enumerate(starts_ns) if inside(start))
        return flop_totals(ops, _parents(ops), _trace_details), len(spans)

    def rows(self, top: int | None = None) -> list[OpRow]:
        if self.given_up or not self.has_shapes:
            return []
        device: dict[Any, list[int]] = {}
        for corr, ext, dur in self.activities:
            link = self.launch_to_op.get(corr, ext)
            if link is None:
                continue
            slot = device.setdefault(link, [0, 0])
            slot[0] += dur
            slot[1] += 1
        return _rows(self.ops, device, _trace_details, top, self.parents())


def _all_inside(times: Iterable[int], spans: Sequence[tuple[int, int]]) -> bool:
    """Whether each of ``times`` lies in the span (of ``spans``, sorted) that
    starts last at or before it, as ``t < end`` of that span.  Times in a row
    that fall in one span's stretch, from its start to its end or the next
    span's start, need no search."""
    starts = [lo for lo, _hi in spans]
    last = len(spans) - 1
    lo = hi = 0  # the stretch where the last answer holds: [lo, hi)
    for t in times:
        if lo <= t < hi:
            continue
        i = bisect.bisect_right(starts, t) - 1
        if i < 0 or t >= spans[i][1]:
            return False
        lo, hi = starts[i], spans[i][1]
        if i < last and starts[i + 1] < hi:
            hi = starts[i + 1]
    return True


def rows_from_chrome_trace(trace: Mapping[str, Any], top: int | None = None) -> list[OpRow]:
    """Op rows of a Chrome trace written by torch.profiler (parsed JSON); none for
    a trace recorded without ``record_shapes``."""
    events = trace.get("traceEvents") if isinstance(trace, Mapping) else None
    if not isinstance(events, list):
        return []
    collector = ChromeTraceOps()
    collector.add(events)
    return collector.rows(top)


def _untyped_activity(ev: Any) -> str:
    """The activity type of an event of a torch without ``activity_type()``."""
    name = ev.name()
    on_gpu = getattr(ev.device_type(), "name", "CPU") != "CPU"
    if is_user_annotation(ev) or _STEP_MARK.match(name):
        return "user_annotation"
    activity = infer_activity(name, on_gpu)
    if activity == "cpu_op" and ev.linked_correlation_id():
        return "cuda_runtime"  # a host event that links to an op launches its work
    return activity or "kernel"


def rows_from_kineto(events: Iterable[Any], top: int | None = None) -> list[OpRow]:
    """Op rows of a finished capture's raw events
    (``prof.profiler.kineto_results.events()``, torch >= 2.1; checked on 2.13).

    Shapes, dtypes and FLOPs are read only for the ops that end up in a row, so the
    cost is one pass over cheap accessors (name, times, ids) for the rest."""
    return ops_from_kineto(events, top)[0]


def ops_from_kineto(
    events: Iterable[Any], top: int | None = None
) -> tuple[list[OpRow], FlopTotals]:
    """The op rows of a capture's raw events, and its FLOP totals over every op."""
    ops = OpTable()
    device: dict[Any, list[int]] = {}
    for ev in events:
        # The activity type alone sorts events: ops are "cpu_op"; runtime calls
        # (cudaLaunchKernel), user annotations and Python frames are other CPU
        # kinds; GPU work is "kernel", "gpu_memcpy"...  One accessor call spared
        # per event is ~10% of this pass on a 50k-event capture.  torch 2.11's
        # events have no activity type: the device and the name tell instead.
        try:
            typed = getattr(ev, "activity_type", None)
            activity = typed() if typed is not None else _untyped_activity(ev)
            if activity == "cpu_op":
                if ev.is_async():
                    continue
                start = ev.start_ns()
                ops.append(
                    ev.start_thread_id(),
                    start,
                    start + ev.duration_ns(),
                    ev.name(),
                    ev.correlation_id(),
                    ev,
                )
            elif activity in GPU_ACTIVITIES:
                link = ev.linked_correlation_id()
                if not link or off_device(activity, ev.name()):
                    continue
                slot = device.setdefault(link, [0, 0])
                slot[0] += ev.duration_ns()
                slot[1] += 1
        except Exception:  # an event without the accessors of torch >= 2.1: skip it
            continue
    parent = _parents(ops)
    return _rows(ops, device, _kineto_details, top, parent), flop_totals(
        ops, parent, _kineto_details
    )
