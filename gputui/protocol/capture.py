"""Typed capture messages: a capture's progress, and its result with the kernel
table, the CPU-op table, the GPU time split and the trace metrics (standard
library only).

See :mod:`gputui.protocol.schema` for the conventions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from gputui.protocol import fields as f
from gputui.protocol import messages as m
from gputui.protocol import spec
from gputui.protocol.fields import MAX_PID, MAX_TIME_S
from gputui.protocol.op_rows import MAX_OP_ROWS, FlopTotals, OpRow
from gputui.protocol.progress import Progress
from gputui.protocol.trace_metrics import TraceMetrics
from gputui.protocol.value import value_class

#: longest kernel or op name kept on the wire (demangled templates run long)
MAX_NAME = 4096
#: most table rows in a result
MAX_ROWS = 1000
_BIG = 1e15  # microseconds: a bound no real capture reaches
#: the parents of a capture's conversions a result carries
MAX_CAST_PARENTS = 16


def _cast_parents(obj: Mapping[str, Any], key: str, where: str) -> tuple[tuple[str, int], ...]:
    got = f.child(obj, key, where) or {}
    pairs = [
        (str(k)[:MAX_NAME], int(f.check_number(v, f"{where}.{key}", 0, 1e12)))
        for k, v in list(got.items())[:MAX_CAST_PARENTS]
    ]
    return tuple(sorted(pairs, key=lambda kv: (-kv[1], kv[0])))


@spec.message(m.CAPTURE_STATUS)
@value_class
class CaptureStatus(Progress):
    """Progress of one capture: a state of ``messages.CAPTURE_STATES``."""

    ACTIVE: ClassVar[frozenset[str]] = frozenset(m.CAPTURE_ACTIVE)

    warmup: int | None = spec.integer(None, omit_none=True)


@spec.value("kernel")
@value_class
class KernelRow(spec.Wire):
    """One GPU activity name (kernel, memcpy, memset) summed over the capture."""

    name: str = spec.text(limit=MAX_NAME)
    #: one of trace.kernels.KERNEL_CLASSES
    kernel_class: str = spec.text(limit=32, key="class", missing="other")
    calls: int = spec.integer()
    total_us: float = spec.number(hi=_BIG)
    mean_us: float = spec.number(hi=_BIG, missing=0.0)
    min_us: float = spec.number(0.0, hi=_BIG)
    max_us: float = spec.number(0.0, hi=_BIG)
    share: float = spec.number(0.0, hi=1.0 + 1e-6)  # of all kernel time


@spec.value("cpu_op")
@value_class
class CpuOpRow(spec.Wire):
    """One CPU op name summed over the capture, by self time."""

    name: str = spec.text(limit=MAX_NAME)
    calls: int = spec.integer()
    self_us: float = spec.number(hi=_BIG)
    total_us: float = spec.number(hi=_BIG, missing=0.0)
    mean_self_us: float = spec.number(0.0, hi=_BIG)
    share: float = spec.number(0.0, hi=1.0 + 1e-6)  # of all op self time


@spec.value("gpu_time")
@value_class
class GpuTime(spec.Wire):
    """The capture's GPU timeline on its busiest device, by HTA's definitions:
    span = last end - first start, busy = union of all activity, idle = span -
    busy; per coarse class the union of its intervals."""

    device: int = spec.integer(hi=1 << 16, missing=0)
    span_us: float = spec.number(hi=_BIG)
    busy_us: float = spec.number(hi=_BIG)
    idle_us: float = spec.number(hi=_BIG, missing=0.0)
    compute_us: float = spec.number(0.0, hi=_BIG)
    communication_us: float = spec.number(0.0, hi=_BIG)
    memcpy_us: float = spec.number(0.0, hi=_BIG)
    memset_us: float = spec.number(0.0, hi=_BIG)
    #: |compute ∩ communication| / |communication|; None without communication
    comm_compute_overlap: float | None = spec.number(None, hi=1.0 + 1e-6)

    @property
    def busy_pct(self) -> float | None:
        return 100.0 * self.busy_us / self.span_us if self.span_us > 0 else None


@spec.value("options")
@value_class
class CaptureOptions(spec.Wire):
    shapes: bool = False
    stacks: bool = False
    memory: bool = False
    flops: bool = False


def _by_class(obj: Mapping[str, Any], key: str, where: str) -> dict[str, float]:
    """Kernel class -> microseconds (the first 64)."""
    by_class = f.child(obj, key, where) or {}
    return {
        str(k): f.check_number(v, f"{where}.{key}.{k}", 0.0, _BIG)
        for k, v in list(by_class.items())[:64]
    }


@spec.message(m.CAPTURE_RESULT)
@value_class
class CaptureResult(spec.Wire):
    """A finished capture: its window, tables, GPU time split and trace file."""

    id: str | None = spec.ident()
    pid: int | None = spec.integer(None, 1, MAX_PID)
    first_step: int | None = None
    last_step: int | None = spec.integer(None, lo=-1)
    steps: int | None = None
    warmup: int | None = None
    options: CaptureOptions = spec.nested(CaptureOptions, factory=CaptureOptions)
    periodic: bool = False
    started: float | None = spec.number(None, hi=MAX_TIME_S)  # Unix seconds the profiler started
    window_end_wall: float | None = spec.number(None, hi=MAX_TIME_S)
    # what it cost, in milliseconds
    stop_ms: float | None = spec.number(None, hi=_BIG)  # torch's own profiler stop
    #: the hook's share of the stall, beyond stop
    hook_stall_ms: float | None = spec.number(None, lo=-_BIG, hi=_BIG)
    reduce_ms: float | None = spec.number(None, hi=_BIG)
    export_ms: float | None = spec.number(None, hi=_BIG)
    #: from the window's end to this result
    ready_after_ms: float | None = spec.number(None, hi=_BIG)
    events: int = 0  # raw profiler events reduced
    kernels: tuple[KernelRow, ...] = spec.rows(KernelRow, MAX_ROWS)
    kernel_names: int = 0
    kernel_calls: int = 0
    kernel_total_us: float = spec.number(0.0, hi=_BIG)
    #: kernel class -> microseconds, biggest first
    by_class: Mapping[str, float] = spec.field(_by_class, factory=dict, write="dict({v})")
    gpu_time: GpuTime | None = spec.nested(GpuTime)
    cpu_ops: tuple[CpuOpRow, ...] = spec.rows(CpuOpRow, MAX_ROWS)
    cpu_op_names: int = 0
    cpu_self_total_us: float = spec.number(0.0, hi=_BIG)
    #: the timeline metrics (HTA breakdowns, launch statistics, step breakdown);
    #: None from a hook that predates them, or when they could not be computed
    trace_metrics: TraceMetrics | None = spec.nested(TraceMetrics)
    #: per op and input signature: FLOPs, bytes moved, GPU time (captures with
    #: ``flops``; the roofline), most GPU time first
    op_rows: tuple[OpRow, ...] = spec.rows(OpRow, MAX_OP_ROWS)
    #: what building them cost the capture thread
    op_rows_ms: float | None = spec.number(None, hi=_BIG)
    #: model and hardware FLOPs over every op of the captured steps (captures
    #: with ``flops``; the MFU); None (absent on the wire) from a hook that predates them
    flop_totals: FlopTotals | None = spec.nested(FlopTotals, omit_none=True)
    trace_path: str | None = None
    trace_bytes: int | None = None
    trace_error: str | None = None
    error: str | None = None
    #: the captured conversions (``aten::to``) by the torch op or autograd node
    #: each runs directly inside, "" for the program's own (autocast casts
    #: inside the op it feeds): at most :data:`MAX_CAST_PARENTS`, the most
    #: first; empty (absent) where the capture's top ops hold no conversion, or
    #: from a hook that predates it
    cast_parents: tuple[tuple[str, int], ...] = spec.field(
        _cast_parents, default=(), write="dict({v})", omit_empty=True
    )
    #: taken by a viewer on its own (the automatic capture); False from a hook
    #: that predates it, whoever asked (sent only when true)
    auto: bool = spec.flag(omit_empty=True)
    #: sent again to a viewer that connected after the capture finished
    replay: bool = spec.flag(omit_empty=True)

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
