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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gputui.analysis import op_costs
from gputui.analysis.op_costs import Shape

#: GPU activities that are work (annotations mirrored on the GPU timeline are not)
GPU_ACTIVITIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "concurrent_kernel"})
_LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver"})
PROFILER = "profiler"
ESTIMATED = "estimated"
MAX_DIMS = 16


@dataclass(frozen=True)
class OpRow:
    """One op with one input signature, summed over its calls."""

    name: str
    input_dims: tuple[Shape | None, ...]
    input_types: tuple[str, ...]
    calls: int
    device_us: float  #: GPU time of the kernels it (or an op under it) launched
    kernels: int
    flops: float | None  #: total over the calls
    flops_source: str | None  #: "profiler" (torch's count) or "estimated" (op_costs)
    bytes_moved: float | None  #: total over the calls, estimated (op_costs)
    bytes_rule: str

    @property
    def dtype_family(self) -> str | None:
        return op_costs.dtype_family(self.input_types)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (tuples become lists), for a capture result."""
        return {
            "name": self.name,
            "input_dims": [list(d) if d is not None else None for d in self.input_dims],
            "input_types": list(self.input_types),
            "calls": self.calls,
            "device_us": round(self.device_us, 3),
            "kernels": self.kernels,
            "flops": self.flops,
            "flops_source": self.flops_source,
            "bytes_moved": self.bytes_moved,
            "bytes_rule": self.bytes_rule,
        }

    @classmethod
    def from_dict(cls, data: Any) -> OpRow | None:
        """A row sent by :meth:`to_dict` (from another process: checked), or None."""
        if not isinstance(data, Mapping):
            return None
        name: Any = data.get("name")
        calls: Any = data.get("calls")
        kernels: Any = data.get("kernels")
        device_us: Any = data.get("device_us")
        rule: Any = data.get("bytes_rule")
        if not isinstance(name, str) or not isinstance(rule, str):
            return None
        if not _count(calls) or not _count(kernels, zero=True) or not _number(device_us):
            return None
        flops, moved = data.get("flops"), data.get("bytes_moved")
        if (flops is not None and not _number(flops)) or (moved is not None and not _number(moved)):
            return None
        source = data.get("flops_source")
        if source not in (PROFILER, ESTIMATED, None):
            return None
        dims = _dims(data.get("input_dims"))
        types = _strings(data.get("input_types"))
        if len(dims) > 64 or len(types) > 64:
            return None
        return cls(
            name=name[:1000],
            input_dims=dims,
            input_types=tuple(t[:100] for t in types),
            calls=int(calls),
            device_us=float(device_us),
            kernels=int(kernels),
            flops=None if flops is None else float(flops),
            flops_source=source if flops is not None else None,
            bytes_moved=None if moved is None else float(moved),
            bytes_rule=rule[:20],
        )

    def shapes_text(self) -> str:
        """``8192x1024 · 1024x3072``: the tensor inputs' shapes."""
        parts = []
        for dims, t in zip(self.input_dims, self.input_types, strict=False):
            if dims is not None and op_costs.is_tensor_type(t):
                parts.append("x".join(str(d) for d in dims) if dims else "scalar")
        return " · ".join(parts)


def _count(value: Any, zero: bool = False) -> bool:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and (value >= 0 if zero else value > 0)
    )


def _number(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and value >= 0
        and value != float("inf")
    )


class _Op:
    __slots__ = ("details", "end", "link", "name", "source", "start", "tid")

    def __init__(self, tid: Any, start: int, end: int, name: str, link: Any, source: Any) -> None:
        self.tid = tid
        self.start = start
        self.end = end
        self.name = name
        self.link = link
        self.source = source  # the args dict (trace) or the event (kineto), read on demand
        self.details: tuple[tuple[Shape | None, ...], tuple[str, ...], tuple[str, ...], Any] | None
        self.details = None


def _parents(ops: Sequence[_Op]) -> list[int]:
    """Index of each op's enclosing op on the same thread (-1: none)."""
    parent = [-1] * len(ops)
    by_thread: dict[Any, list[int]] = {}
    for i, op in enumerate(ops):
        by_thread.setdefault(op.tid, []).append(i)
    for indexes in by_thread.values():
        indexes.sort(key=lambda i: (ops[i].start, -ops[i].end))
        stack: list[int] = []
        for i in indexes:
            while stack and ops[stack[-1]].end <= ops[i].start:
                stack.pop()
            if stack:
                parent[i] = stack[-1]
            stack.append(i)
    return parent


def _owner(i: int, ops: Sequence[_Op], parent: Sequence[int]) -> int:
    owner = i
    j = i
    while j >= 0:
        if ops[j].name in op_costs.FLOP_OPS:
            owner = j
        j = parent[j]
    return owner


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


def _trace_details(args: Mapping[str, Any]) -> Any:
    flops = args.get("flops")
    return (
        _dims(args.get("Input Dims")),
        _strings(args.get("Input type")),
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
    return (
        _dims(call("shapes")),
        _strings(call("dtypes")),
        _strings(call("concrete_inputs")),
        flops if isinstance(flops, (int, float)) and flops > 0 else None,
    )


def _rows(
    ops: list[_Op], device: Mapping[Any, list[int]], details: Any, top: int | None
) -> list[OpRow]:
    """Sum device time per owner op, then per (name, shapes, dtypes)."""
    index = {op.link: i for i, op in enumerate(ops)}
    parent = _parents(ops)
    owned: dict[int, list[int]] = {}  # op index -> [device ns, kernels]
    for link, (ns, count) in device.items():
        i = index.get(link)
        if i is None:
            continue
        slot = owned.setdefault(_owner(i, ops, parent), [0, 0])
        slot[0] += ns
        slot[1] += count
    if not device:
        # A CPU-only capture: the ops with a FLOP formula are rows, without GPU time.
        for i, op in enumerate(ops):
            if op.name in op_costs.FLOP_OPS and _owner(i, ops, parent) == i:
                owned.setdefault(i, [0, 0])
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for i, (ns, count) in owned.items():
        op = ops[i]
        if op.details is None:
            op.details = details(op.source)
        dims, types, concrete, recorded = op.details
        flops: float | None
        source: str | None
        if recorded is not None:
            flops, source = float(recorded), PROFILER
        else:
            flops = op_costs.estimate_flops(op.name, dims, types, concrete)
            source = ESTIMATED if flops is not None else None
        moved, rule = op_costs.estimate_bytes(op.name, dims, types, concrete)
        key = (op.name, dims, types)
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


def _ns(us: Any) -> int | None:
    if isinstance(us, bool) or not isinstance(us, (int, float)) or not -1e15 < us < 1e15:
        return None  # also NaN and infinities
    return round(us * 1000.0)


def rows_from_chrome_trace(trace: Mapping[str, Any], top: int | None = None) -> list[OpRow]:
    """Op rows of a Chrome trace written by torch.profiler (parsed JSON)."""
    events = trace.get("traceEvents") if isinstance(trace, Mapping) else None
    if not isinstance(events, list):
        return []
    ops: list[_Op] = []
    launch_to_op: dict[Any, Any] = {}  # correlation -> External id of the launching op
    activities: list[tuple[Any, Any, int]] = []  # (correlation, External id, dur ns)
    for ev in events:
        if not isinstance(ev, dict):
            continue
        cat = ev.get("cat")
        args = ev.get("args")
        if not isinstance(args, dict):
            continue
        if cat == "cpu_op":
            start, dur = _ns(ev.get("ts")), _ns(ev.get("dur"))
            ext = args.get("External id")
            if start is None or dur is None or ext is None:
                continue
            tid = (ev.get("pid"), ev.get("tid"))
            ops.append(_Op(tid, start, start + dur, str(ev.get("name", "")), ext, args))
        elif cat in _LAUNCH_CATS:
            if "correlation" in args and "External id" in args:
                launch_to_op[args["correlation"]] = args["External id"]
        elif cat in GPU_ACTIVITIES:
            dur = _ns(ev.get("dur"))
            if dur is not None:
                activities.append((args.get("correlation"), args.get("External id"), dur))
    device: dict[Any, list[int]] = {}
    for corr, ext, dur in activities:
        link = launch_to_op.get(corr, ext)
        if link is None:
            continue
        slot = device.setdefault(link, [0, 0])
        slot[0] += dur
        slot[1] += 1
    return _rows(ops, device, _trace_details, top)


def rows_from_kineto(events: Iterable[Any], top: int | None = None) -> list[OpRow]:
    """Op rows of a finished capture's raw events
    (``prof.profiler.kineto_results.events()``, torch >= 2.1; checked on 2.13).

    Shapes, dtypes and FLOPs are read only for the ops that end up in a row, so the
    cost is one pass over cheap accessors (name, times, ids) for the rest."""
    ops: list[_Op] = []
    device: dict[Any, list[int]] = {}
    for ev in events:
        # The activity type alone sorts events: ops are "cpu_op"; runtime calls
        # (cudaLaunchKernel), user annotations and Python frames are other CPU
        # kinds; GPU work is "kernel", "gpu_memcpy"...  One accessor call spared
        # per event is ~10% of this pass on a 50k-event capture.
        try:
            activity = ev.activity_type()
            if activity == "cpu_op":
                if ev.is_async():
                    continue
                start = ev.start_ns()
                op = _Op(
                    ev.start_thread_id(),
                    start,
                    start + ev.duration_ns(),
                    ev.name(),
                    ev.correlation_id(),
                    ev,
                )
                ops.append(op)
            elif activity in GPU_ACTIVITIES:
                link = ev.linked_correlation_id()
                if not link:
                    continue
                slot = device.setdefault(link, [0, 0])
                slot[0] += ev.duration_ns()
                slot[1] += 1
        except Exception:  # an event without the accessors of torch >= 2.1: skip it
            continue
    return _rows(ops, device, _kineto_details, top)
