"""What the attach screen knows about a job, gathered off the UI thread.

:class:`AttachState` is fed by the hook client's reader thread (or a replay
thread): every event is appended to bounded deques under a lock, never handed to
Textual one by one, so 1,000 steps/s cost the UI nothing until its 4 Hz timer
asks for :meth:`AttachState.snapshot`.  :func:`build_view` then turns that
snapshot into plain values for the widgets (statistics, bar columns, outliers,
memory growth, the kernel tables).  Nothing here imports textual.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gputui.analysis.kernels import short_kernel_name
from gputui.analysis.steps import StepStats, phase_order, step_stats
from gputui.collectors.hook_client import (
    CaptureResult,
    CaptureStatus,
    Disconnected,
    Event,
    Hello,
    HookMessage,
    MemoryBatch,
    MemorySample,
    Status,
    StepBatch,
    StepRecord,
    Synced,
)

#: steps kept for the bars, the history graph and the statistics
STEP_WINDOW = 2000
#: steps the percentiles and shares are computed over (the newest)
STATS_WINDOW = 1000
#: memory samples kept: ten minutes at the hook's 2 Hz
MEMORY_POINTS = 1200
#: the first steps of a job are warm-up (allocator, cudnn autotune, compilation)
WARMUP_STEPS = 3
#: a step slower than this many times the median is an outlier (checkpoint, eval, GC)
SLOW_FACTOR = 3.0
#: capture states that mean the profiler is working for some viewer
CAPTURE_BUSY = ("armed", "warmup", "recording", "processing")
CAPTURE_FAILED = ("refused", "busy", "cancelled", "failed")
#: memory baseline growth this large over the window is flagged (bytes)
GROWTH_FLAG_BYTES = 64 * 2**20


@dataclass(frozen=True)
class StateSnapshot:
    """A consistent copy of the state, taken under the lock (cheap: references)."""

    version: int
    hello: Hello | None
    steps: tuple[StepRecord, ...]
    steps_received: int
    missed: int
    synced: bool
    memory: tuple[tuple[MemorySample, int | None], ...]
    status: Status | None
    capture_status: CaptureStatus | None
    capture: CaptureResult | None
    capture_wanted: str | None
    disconnected: Disconnected | None
    hook_messages: tuple[str, ...]
    connect_error: str | None
    connecting: bool


class AttachState:
    """Thread-safe accumulator of one attach session's events."""

    def __init__(self, step_window: int = STEP_WINDOW, memory_points: int = MEMORY_POINTS) -> None:
        self._lock = threading.Lock()
        self._step_window = step_window
        self._memory_points = memory_points
        self.reset()

    def reset(self) -> None:
        """Forget everything (a replay starting over)."""
        with self._lock:
            self._version = 0
            self._hello: Hello | None = None
            self._steps: deque[StepRecord] = deque(maxlen=self._step_window)
            self._last_index = -1
            self._received = 0
            self._missed = 0
            self._synced = False
            self._memory: deque[tuple[MemorySample, int | None]] = deque(maxlen=self._memory_points)
            self._status: Status | None = None
            self._capture_status: CaptureStatus | None = None
            self._capture: CaptureResult | None = None
            self._capture_wanted: str | None = None
            self._disconnected: Disconnected | None = None
            self._hook_messages: deque[str] = deque(maxlen=5)
            self._connect_error: str | None = None
            self._connecting = False

    @property
    def version(self) -> int:
        return self._version

    # -- writers (any thread) --------------------------------------------------------
    def set_hello(self, hello: Hello) -> None:
        with self._lock:
            self._hello = hello
            self._disconnected = None
            self._connect_error = None
            self._connecting = False
            self._synced = False
            self._version += 1

    def set_connecting(self, connecting: bool, error: str | None = None) -> None:
        with self._lock:
            self._connecting = connecting
            self._connect_error = error
            self._version += 1

    def set_capture_wanted(self, capture_id: str | None) -> None:
        with self._lock:
            self._capture_wanted = capture_id
            self._version += 1

    def add(self, event: Event) -> None:
        """Take one event (called on the reader thread)."""
        with self._lock:
            self._version += 1
            if isinstance(event, StepBatch):
                self._missed += event.missed
                for step in event.steps:
                    # A reconnect asks for history again: keep each step index once.
                    if step.index > self._last_index:
                        self._steps.append(step)
                        self._last_index = step.index
                        self._received += 1
            elif isinstance(event, MemoryBatch):
                at = self._last_index if self._last_index >= 0 else None
                for sample in event.samples:
                    self._memory.append((sample, at))
            elif isinstance(event, Status):
                self._status = event
            elif isinstance(event, CaptureStatus):
                self._capture_status = event
            elif isinstance(event, CaptureResult):
                self._capture = event
                if event.id == self._capture_wanted:
                    self._capture_wanted = None
            elif isinstance(event, Synced):
                self._synced = True
            elif isinstance(event, Disconnected):
                self._disconnected = event
                self._capture_wanted = None
            elif isinstance(event, HookMessage) and event.type == "error":
                self._hook_messages.append(str(event.raw.get("message") or event.raw))

    # -- reader (UI thread) --------------------------------------------------------------
    def snapshot(self) -> StateSnapshot:
        with self._lock:
            return StateSnapshot(
                version=self._version,
                hello=self._hello,
                steps=tuple(self._steps),
                steps_received=self._received,
                missed=self._missed,
                synced=self._synced,
                memory=tuple(self._memory),
                status=self._status,
                capture_status=self._capture_status,
                capture=self._capture,
                capture_wanted=self._capture_wanted,
                disconnected=self._disconnected,
                hook_messages=tuple(self._hook_messages),
                connect_error=self._connect_error,
                connecting=self._connecting,
            )


# -- the view: plain values for the widgets ------------------------------------------------
@dataclass(frozen=True)
class StepColumn:
    """One step of the bar chart: seconds per phase (display order) and its marks."""

    index: int
    total_s: float
    segments: tuple[tuple[str, float], ...]
    warmup: bool
    profiled: bool
    slow: bool


@dataclass(frozen=True)
class Outlier:
    index: int
    wall_s: float
    why: str  # "warm-up", "profiled", "slow"


@dataclass(frozen=True)
class MemoryView:
    device: int
    total_bytes: int | None
    allocated: tuple[float, ...]
    reserved: tuple[float, ...]
    peak: tuple[float, ...]
    latest: MemorySample
    #: baseline growth of allocated bytes per step over the window (None: too few points)
    growth_per_step: float | None
    growth_steps: int
    growing: bool


@dataclass(frozen=True)
class KernelRow:
    name: str
    short: str
    kind: str
    calls: int
    total_us: float
    mean_us: float
    share: float


@dataclass(frozen=True)
class CpuOpRow:
    name: str
    calls: int
    self_us: float
    total_us: float
    share: float


@dataclass(frozen=True)
class CaptureView:
    id: Any
    first_step: int | None
    last_step: int | None
    started_s: float | None
    kernels: tuple[KernelRow, ...]
    cpu_ops: tuple[CpuOpRow, ...]
    #: (class, microseconds, share of kernel time), biggest first
    classes: tuple[tuple[str, float, float], ...]
    span_us: float | None
    busy_us: float | None
    kernel_calls: int | None
    events: int | None
    trace_path: str | None
    trace_error: str | None
    error: str | None
    replayed: bool


@dataclass(frozen=True)
class AttachView:
    """Everything the screen draws, computed once per refresh from a snapshot."""

    snap: StateSnapshot
    now_s: float
    gpu_mode: bool  # GPU times shown (asked for, and the job has them)
    gpu_requested: bool
    stats: StepStats
    phases: tuple[str, ...]
    columns: tuple[StepColumn, ...]
    history_wall: tuple[float, ...]
    history_gpu: tuple[float, ...] | None
    outliers: tuple[Outlier, ...]
    memory: MemoryView | None
    capture: CaptureView | None
    capture_progress: str | None
    #: analyzer findings (severity, title, evidence); empty until the analyzer lands
    findings: tuple[tuple[str, str, str], ...] = field(default=())

    @property
    def has_gpu_times(self) -> bool:
        return self.stats.gpu is not None


def _segments(step: StepRecord, gpu: bool, order: Sequence[str]) -> tuple[float, tuple]:
    phases: Mapping[str, float] = step.phases
    total = step.wall
    if gpu and step.gpu is not None:
        phases = step.gpu
        total = float(step.gpu_total if step.gpu_total is not None else sum(phases.values()))
    return total, tuple((name, float(phases[name])) for name in order if phases.get(name))


def build_view(
    snap: StateSnapshot,
    now_s: float,
    gpu_mode: bool = False,
    columns: int = 200,
    previous: AttachView | None = None,
    reuse_stats: bool = False,
) -> AttachView:
    """The screen's values: ``columns`` newest steps as bars, statistics over the
    newest :data:`STATS_WINDOW` steps (profiled ones left out).

    With ``previous``, parts whose inputs did not change are reused (the capture
    tables, the memory series), and ``reuse_stats`` keeps its percentiles and
    outliers: the screen recomputes those once a second, the bars four times.
    """
    steps = snap.steps
    if (
        reuse_stats
        and previous is not None
        and previous.gpu_requested == gpu_mode
        and previous.stats.count  # the first steps are shown at once, not a second late
    ):
        stats, found = previous.stats, previous.outliers
    else:
        stats = step_stats(steps[-STATS_WINDOW:])
        p50_now = stats.wall.p50 if stats.wall is not None else None
        found = outliers(steps, p50_now)
    names: set[str] = set()
    for step in steps[-max(columns, 1) :]:
        names.update(step.phases)
    for d in stats.phases:
        names.add(d.name)
    order = tuple(phase_order(names))
    p50 = stats.wall.p50 if stats.wall is not None else None
    cols: list[StepColumn] = []
    use_gpu = gpu_mode and stats.gpu is not None
    for step in steps[-max(columns, 1) :]:
        total, segs = _segments(step, use_gpu, order)
        cols.append(
            StepColumn(
                index=step.index,
                total_s=total,
                segments=segs,
                warmup=step.index < WARMUP_STEPS,
                profiled=step.profiled,
                slow=_slow(step, p50),
            )
        )
    history_wall = tuple(s.wall for s in steps)
    gpu_values = tuple(float(s.gpu_total) for s in steps if s.gpu_total is not None)
    memory = None
    if previous is not None and _same_tail(previous.snap.memory, snap.memory):
        memory = previous.memory
    elif snap.memory:
        memory = memory_view(snap)
    capture = None
    if previous is not None and previous.snap.capture is snap.capture:
        capture = previous.capture
    else:
        capture = capture_view(snap.capture)
    return AttachView(
        snap=snap,
        now_s=now_s,
        gpu_mode=use_gpu,
        gpu_requested=gpu_mode,
        stats=stats,
        phases=order,
        columns=tuple(cols),
        history_wall=history_wall,
        history_gpu=gpu_values or None,
        outliers=found,
        memory=memory,
        capture=capture,
        capture_progress=capture_progress(snap),
    )


def _same_tail(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """The same bounded series: as long, ending with the very same sample."""
    return len(a) == len(b) and (not a or a[-1] is b[-1])


def _slow(step: StepRecord, p50: float | None) -> bool:
    return p50 is not None and p50 > 0 and step.wall > SLOW_FACTOR * p50


def outliers(steps: Sequence[StepRecord], p50: float | None, limit: int = 6) -> tuple[Outlier, ...]:
    """The newest slow steps, newest first; those among the first steps are called
    warm-up.  Profiled steps are slow by design: the bars mark them instead."""
    found: list[Outlier] = []
    for step in reversed(steps):
        if step.profiled or not _slow(step, p50):
            continue
        why = "warm-up" if step.index < WARMUP_STEPS else "slow"
        found.append(Outlier(step.index, step.wall, why))
        if len(found) >= limit:
            break
    return tuple(found)


def memory_view(snap: StateSnapshot) -> MemoryView | None:
    if not snap.memory:
        return None
    latest, _ = snap.memory[-1]
    device = latest.device
    points = [(s, at) for s, at in snap.memory if s.device == device]
    total = None
    if snap.hello is not None and snap.hello.device:
        raw_total = snap.hello.device.get("total_memory")
        total = int(raw_total) if isinstance(raw_total, (int, float)) else None
    growth, span, growing = memory_growth(points)
    return MemoryView(
        device=device,
        total_bytes=total,
        allocated=tuple(float(s.allocated) for s, _ in points),
        reserved=tuple(float(s.reserved) for s, _ in points),
        peak=tuple(float(s.peak_allocated) for s, _ in points),
        latest=latest,
        growth_per_step=growth,
        growth_steps=span,
        growing=growing,
    )


def memory_growth(
    points: Sequence[tuple[MemorySample, int | None]],
) -> tuple[float | None, int, bool]:
    """Growth of the allocated baseline per step: (bytes per step, steps spanned, flag).

    Samples land anywhere inside a step (after forward the activations are live,
    after the optimizer they are not), so single samples swing by gigabytes.  The
    baseline is the minimum over the first and over the last third of the window:
    a leak lifts the minimum, the forward/backward swing does not.
    """
    usable = [(s, at) for s, at in points if at is not None]
    if len(usable) < 6:
        return None, 0, False
    third = len(usable) // 3
    head, tail = usable[:third], usable[-third:]
    base_head = min(s.allocated for s, _ in head)
    base_tail = min(s.allocated for s, _ in tail)
    head_step = head[len(head) // 2][1] or 0
    tail_step = tail[len(tail) // 2][1] or 0
    span = tail_step - head_step
    if span <= 0:
        return None, 0, False
    grew = base_tail - base_head
    growing = grew > GROWTH_FLAG_BYTES and grew > 0.05 * max(base_head, 1)
    return grew / span, span, growing


def capture_view(cap: CaptureResult | None) -> CaptureView | None:
    if cap is None:
        return None
    raw = cap.raw
    kernels = tuple(
        KernelRow(
            name=str(k.get("name", "")),
            short=short_kernel_name(str(k.get("name", ""))),
            kind=str(k.get("class", "other")),
            calls=int(k.get("calls", 0)),
            total_us=float(k.get("total_us", 0.0)),
            mean_us=float(k.get("mean_us", 0.0)),
            share=float(k.get("share", 0.0)),
        )
        for k in cap.kernels
    )
    ops = tuple(
        CpuOpRow(
            name=str(o.get("name", "")),
            calls=int(o.get("calls", 0)),
            self_us=float(o.get("self_us", 0.0)),
            total_us=float(o.get("total_us", 0.0)),
            share=float(o.get("share", 0.0)),
        )
        for o in cap.cpu_ops
    )
    by_class = {str(k): float(v) for k, v in (cap.by_class or {}).items()}
    class_total = math.fsum(by_class.values())
    classes = tuple(
        (name, us, us / class_total if class_total > 0 else 0.0)
        for name, us in sorted(by_class.items(), key=lambda item: -item[1])
    )
    gpu = cap.gpu_time or {}
    span = gpu.get("span_us")
    busy = gpu.get("busy_us")
    started = raw.get("started")
    return CaptureView(
        id=cap.id,
        first_step=cap.first_step,
        last_step=cap.last_step,
        started_s=float(started) if isinstance(started, (int, float)) else None,
        kernels=kernels,
        cpu_ops=ops,
        classes=classes,
        span_us=float(span) if isinstance(span, (int, float)) else None,
        busy_us=float(busy) if isinstance(busy, (int, float)) else None,
        kernel_calls=raw.get("kernel_calls") if isinstance(raw.get("kernel_calls"), int) else None,
        events=raw.get("events") if isinstance(raw.get("events"), int) else None,
        trace_path=cap.trace_path,
        trace_error=str(raw["trace_error"]) if raw.get("trace_error") else None,
        error=cap.error,
        replayed=cap.replay,
    )


def capture_progress(snap: StateSnapshot) -> str | None:
    """One line on the capture under way (or the last one that failed), else None."""
    status = snap.capture_status
    if status is None:
        if snap.capture_wanted:
            return "capture requested, waiting for the hook"
        return None
    done = snap.capture is not None and snap.capture.id == status.id
    if done and status.state not in CAPTURE_FAILED:
        return None
    state = status.state
    raw = status.raw
    if state == "armed":
        return "capture armed: starts at the next step boundary"
    if state == "warmup":
        return f"capture warm-up at step {status.step}"
    if state == "recording":
        wanted = raw.get("steps")
        last = snap.steps[-1].index if snap.steps else None
        if isinstance(wanted, int) and status.step is not None and last is not None:
            got = max(0, min(wanted, last - status.step + 1))
            return f"capture recording: step {got}/{wanted} (from step {status.step})"
        return f"capture recording from step {status.step}"
    if state == "processing":
        return "capture processing: stopping the profiler, reducing the trace"
    if state in CAPTURE_FAILED:
        reason = f": {status.reason}" if status.reason else ""
        return f"capture {state}{reason}"
    return f"capture {state}"
