"""Typed capture messages: a capture's progress, and its result with the kernel
table, the CPU-op table, the GPU time split and the trace metrics (standard
library only).

See :mod:`gputui.protocol.schema` for the conventions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from gputui.protocol import fields as f
from gputui.protocol import messages as m
from gputui.protocol.fields import MAX_PID, MAX_TIME_S, typed
from gputui.protocol.op_rows import MAX_OP_ROWS, FlopTotals, OpRow
from gputui.protocol.progress import Progress
from gputui.protocol.trace_metrics import TraceMetrics

#: longest kernel or op name kept on the wire (demangled templates run long)
MAX_NAME = 4096
#: most table rows in a result
MAX_ROWS = 1000
_BIG = 1e15  # microseconds: a bound no real capture reaches


@dataclass(frozen=True)
class CaptureStatus(Progress):
    """Progress of one capture: a state of ``messages.CAPTURE_STATES``."""

    TYPE: ClassVar[str] = m.CAPTURE_STATUS
    ACTIVE: ClassVar[frozenset[str]] = frozenset(m.CAPTURE_ACTIVE)
    EXTRA: ClassVar[tuple[str, ...]] = ("warmup",)

    warmup: int | None = None

    @classmethod
    def from_wire(cls, obj: Any, where: str = "capture_status") -> CaptureStatus:
        return cls(**cls._fields(obj, where))


@dataclass(frozen=True)
class KernelRow:
    """One GPU activity name (kernel, memcpy, memset) summed over the capture."""

    name: str
    kernel_class: str  # one of trace.kernels.KERNEL_CLASSES ("class" on the wire)
    calls: int
    total_us: float
    mean_us: float
    min_us: float = 0.0
    max_us: float = 0.0
    share: float = 0.0  # of all kernel time

    @classmethod
    def from_wire(cls, obj: Any, where: str) -> KernelRow:
        obj = typed(obj, where)
        return cls(
            name=f.text(obj, "name", where, MAX_NAME),
            kernel_class=f.text(obj, "class", where, 32, default="other"),
            calls=f.integer(obj, "calls", where),
            total_us=f.number(obj, "total_us", where, hi=_BIG),
            mean_us=f.number(obj, "mean_us", where, hi=_BIG, default=0.0),
            min_us=f.number(obj, "min_us", where, hi=_BIG, default=0.0),
            max_us=f.number(obj, "max_us", where, hi=_BIG, default=0.0),
            share=f.number(obj, "share", where, hi=1.0 + 1e-6, default=0.0),
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "class": self.kernel_class,
            "calls": self.calls,
            "total_us": self.total_us,
            "mean_us": self.mean_us,
            "min_us": self.min_us,
            "max_us": self.max_us,
            "share": self.share,
        }


@dataclass(frozen=True)
class CpuOpRow:
    """One CPU op name summed over the capture, by self time."""

    name: str
    calls: int
    self_us: float
    total_us: float
    mean_self_us: float = 0.0
    share: float = 0.0  # of all op self time

    @classmethod
    def from_wire(cls, obj: Any, where: str) -> CpuOpRow:
        obj = typed(obj, where)
        return cls(
            name=f.text(obj, "name", where, MAX_NAME),
            calls=f.integer(obj, "calls", where),
            self_us=f.number(obj, "self_us", where, hi=_BIG),
            total_us=f.number(obj, "total_us", where, hi=_BIG, default=0.0),
            mean_self_us=f.number(obj, "mean_self_us", where, hi=_BIG, default=0.0),
            share=f.number(obj, "share", where, hi=1.0 + 1e-6, default=0.0),
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "calls": self.calls,
            "self_us": self.self_us,
            "total_us": self.total_us,
            "mean_self_us": self.mean_self_us,
            "share": self.share,
        }


@dataclass(frozen=True)
class GpuTime:
    """The capture's GPU timeline on its busiest device, by HTA's definitions:
    span = last end - first start, busy = union of all activity, idle = span -
    busy; per coarse class the union of its intervals."""

    device: int
    span_us: float
    busy_us: float
    idle_us: float
    compute_us: float = 0.0
    communication_us: float = 0.0
    memcpy_us: float = 0.0
    memset_us: float = 0.0
    #: |compute ∩ communication| / |communication|; None without communication
    comm_compute_overlap: float | None = None

    @property
    def busy_pct(self) -> float | None:
        return 100.0 * self.busy_us / self.span_us if self.span_us > 0 else None

    @classmethod
    def from_wire(cls, obj: Any, where: str = "gpu_time") -> GpuTime:
        obj = typed(obj, where)
        return cls(
            device=f.integer(obj, "device", where, 0, 1 << 16, default=0),
            span_us=f.number(obj, "span_us", where, hi=_BIG),
            busy_us=f.number(obj, "busy_us", where, hi=_BIG),
            idle_us=f.number(obj, "idle_us", where, hi=_BIG, default=0.0),
            compute_us=f.number(obj, "compute_us", where, hi=_BIG, default=0.0),
            communication_us=f.number(obj, "communication_us", where, hi=_BIG, default=0.0),
            memcpy_us=f.number(obj, "memcpy_us", where, hi=_BIG, default=0.0),
            memset_us=f.number(obj, "memset_us", where, hi=_BIG, default=0.0),
            comm_compute_overlap=f.opt_number(obj, "comm_compute_overlap", where, hi=1.0 + 1e-6),
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "span_us": self.span_us,
            "busy_us": self.busy_us,
            "idle_us": self.idle_us,
            "compute_us": self.compute_us,
            "communication_us": self.communication_us,
            "memcpy_us": self.memcpy_us,
            "memset_us": self.memset_us,
            "comm_compute_overlap": self.comm_compute_overlap,
        }


@dataclass(frozen=True)
class CaptureOptions:
    shapes: bool = False
    stacks: bool = False
    memory: bool = False
    flops: bool = False

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any], where: str = "options") -> CaptureOptions:
        return cls(
            shapes=f.flag(obj, "shapes", where),
            stacks=f.flag(obj, "stacks", where),
            memory=f.flag(obj, "memory", where),
            flops=f.flag(obj, "flops", where),
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "shapes": self.shapes,
            "stacks": self.stacks,
            "memory": self.memory,
            "flops": self.flops,
        }


@dataclass(frozen=True)
class CaptureResult:
    """A finished capture: its window, tables, GPU time split and trace file."""

    id: str | None = None
    pid: int | None = None
    first_step: int | None = None
    last_step: int | None = None
    steps: int | None = None
    warmup: int | None = None
    options: CaptureOptions = field(default_factory=CaptureOptions)
    periodic: bool = False
    #: taken by a viewer on its own (the automatic capture); False from a hook
    #: that predates it, whoever asked
    auto: bool = False
    started: float | None = None  # Unix seconds the profiler started
    window_end_wall: float | None = None
    # what it cost, in milliseconds
    stop_ms: float | None = None  # torch's own profiler stop
    hook_stall_ms: float | None = None  # the hook's share of the stall, beyond stop
    reduce_ms: float | None = None
    export_ms: float | None = None
    ready_after_ms: float | None = None  # from the window's end to this result
    events: int = 0  # raw profiler events reduced
    kernels: tuple[KernelRow, ...] = ()
    kernel_names: int = 0
    kernel_calls: int = 0
    kernel_total_us: float = 0.0
    #: kernel class -> microseconds, biggest first
    by_class: Mapping[str, float] = field(default_factory=dict)
    gpu_time: GpuTime | None = None
    cpu_ops: tuple[CpuOpRow, ...] = ()
    cpu_op_names: int = 0
    cpu_self_total_us: float = 0.0
    #: the timeline metrics (HTA breakdowns, launch statistics, step breakdown);
    #: None from a hook that predates them, or when they could not be computed
    trace_metrics: TraceMetrics | None = None
    #: per op and input signature: FLOPs, bytes moved, GPU time (captures with
    #: ``flops``; the roofline), most GPU time first
    op_rows: tuple[OpRow, ...] = ()
    op_rows_ms: float | None = None  # what building them cost the capture thread
    #: model and hardware FLOPs over every op of the captured steps (captures
    #: with ``flops``; the MFU); None from a hook that predates them
    flop_totals: FlopTotals | None = None
    trace_path: str | None = None
    trace_bytes: int | None = None
    trace_error: str | None = None
    error: str | None = None
    #: sent again to a viewer that connected after the capture finished
    replay: bool = False

    @property
    def comm_compute_overlap(self) -> float | None:
        """Communication kernels' time overlapped by compute kernels, as a ratio:
        as Holistic Trace Analysis computes it on this capture's trace (its
        window leaves the last step out), else over the whole capture (a hook
        that sent no trace metrics)."""
        metrics = self.trace_metrics
        if metrics is not None:
            pct = metrics.comm_compute_overlap_pct
            return None if pct is None else pct / 100.0
        return None if self.gpu_time is None else self.gpu_time.comm_compute_overlap

    @classmethod
    def from_wire(cls, obj: Any, where: str = "capture_result") -> CaptureResult:
        obj = typed(obj, where)
        options = f.child(obj, "options", where)
        gpu = f.child(obj, "gpu_time", where)
        by_class = f.child(obj, "by_class", where) or {}
        metrics = f.child(obj, "trace_metrics", where)
        totals = f.child(obj, "flop_totals", where)
        return cls(
            id=f.ident(obj, "id", where),
            pid=f.opt_integer(obj, "pid", where, 1, MAX_PID),
            first_step=f.opt_integer(obj, "first_step", where),
            last_step=f.opt_integer(obj, "last_step", where, lo=-1),
            steps=f.opt_integer(obj, "steps", where),
            warmup=f.opt_integer(obj, "warmup", where),
            options=CaptureOptions()
            if options is None
            else CaptureOptions.from_wire(options, where + ".options"),
            periodic=f.flag(obj, "periodic", where),
            auto=f.flag(obj, "auto", where),
            started=f.opt_number(obj, "started", where, hi=MAX_TIME_S),
            window_end_wall=f.opt_number(obj, "window_end_wall", where, hi=MAX_TIME_S),
            stop_ms=f.opt_number(obj, "stop_ms", where, hi=_BIG),
            hook_stall_ms=f.opt_number(obj, "hook_stall_ms", where, lo=-_BIG, hi=_BIG),
            reduce_ms=f.opt_number(obj, "reduce_ms", where, hi=_BIG),
            export_ms=f.opt_number(obj, "export_ms", where, hi=_BIG),
            ready_after_ms=f.opt_number(obj, "ready_after_ms", where, hi=_BIG),
            events=f.integer(obj, "events", where, default=0),
            kernels=tuple(
                KernelRow.from_wire(k, f"{where}.kernels[{i}]")
                for i, k in enumerate(f.items(obj, "kernels", where, MAX_ROWS))
            ),
            kernel_names=f.integer(obj, "kernel_names", where, default=0),
            kernel_calls=f.integer(obj, "kernel_calls", where, default=0),
            kernel_total_us=f.number(obj, "kernel_total_us", where, hi=_BIG, default=0.0),
            by_class={
                str(k): f.check_number(v, f"{where}.by_class.{k}", 0.0, _BIG)
                for k, v in list(by_class.items())[:64]
            },
            gpu_time=None if gpu is None else GpuTime.from_wire(gpu, where + ".gpu_time"),
            cpu_ops=tuple(
                CpuOpRow.from_wire(o, f"{where}.cpu_ops[{i}]")
                for i, o in enumerate(f.items(obj, "cpu_ops", where, MAX_ROWS))
            ),
            cpu_op_names=f.integer(obj, "cpu_op_names", where, default=0),
            cpu_self_total_us=f.number(obj, "cpu_self_total_us", where, hi=_BIG, default=0.0),
            trace_metrics=None
            if metrics is None
            else TraceMetrics.from_wire(metrics, where + ".trace_metrics"),
            op_rows=tuple(
                OpRow.from_wire(o, f"{where}.op_rows[{i}]")
                for i, o in enumerate(f.items(obj, "op_rows", where, MAX_OP_ROWS))
            ),
            op_rows_ms=f.opt_number(obj, "op_rows_ms", where, hi=_BIG),
            flop_totals=None
            if totals is None
            else FlopTotals.from_wire(totals, where + ".flop_totals"),
            trace_path=f.opt_text(obj, "trace_path", where),
            trace_bytes=f.opt_integer(obj, "trace_bytes", where),
            trace_error=f.opt_text(obj, "trace_error", where),
            error=f.opt_text(obj, "error", where),
            replay=f.flag(obj, "replay", where),
        )

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"v": m.PROTOCOL_VERSION, "type": m.CAPTURE_RESULT}
        out.update(
            id=self.id,
            pid=self.pid,
            first_step=self.first_step,
            last_step=self.last_step,
            steps=self.steps,
            warmup=self.warmup,
            options=self.options.to_wire(),
            periodic=self.periodic,
            started=self.started,
            window_end_wall=self.window_end_wall,
            stop_ms=self.stop_ms,
            hook_stall_ms=self.hook_stall_ms,
            reduce_ms=self.reduce_ms,
            export_ms=self.export_ms,
            ready_after_ms=self.ready_after_ms,
            events=self.events,
            kernels=[k.to_wire() for k in self.kernels],
            kernel_names=self.kernel_names,
            kernel_calls=self.kernel_calls,
            kernel_total_us=self.kernel_total_us,
            by_class=dict(self.by_class),
            gpu_time=None if self.gpu_time is None else self.gpu_time.to_wire(),
            cpu_ops=[o.to_wire() for o in self.cpu_ops],
            cpu_op_names=self.cpu_op_names,
            cpu_self_total_us=self.cpu_self_total_us,
            trace_metrics=None if self.trace_metrics is None else self.trace_metrics.to_wire(),
            op_rows=[o.to_wire() for o in self.op_rows],
            op_rows_ms=self.op_rows_ms,
            trace_path=self.trace_path,
            trace_bytes=self.trace_bytes,
            trace_error=self.trace_error,
            error=self.error,
        )
        if self.flop_totals is not None:
            out["flop_totals"] = self.flop_totals.to_wire()
        if self.auto:
            out["auto"] = True
        if self.replay:
            out["replay"] = True
        return out
