"""What the attach screen knows about a job, gathered off the UI thread.

:class:`AttachState` is fed by the hook client's reader thread (or a replay
thread): every event is appended to bounded deques under a lock, never handed to
Textual one by one, so 1,000 steps/s cost the UI nothing until its 4 Hz timer
asks for :meth:`AttachState.snapshot`.  :func:`build_view` then turns that
snapshot into plain values for the widgets (statistics, bar columns, outliers,
memory growth, the kernel tables).  Nothing here imports textual.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gputui.analysis.auto_capture import CaptureCost, capture_cost
from gputui.analysis.engine import analyze
from gputui.analysis.evidence import CaptureView, JobEvidence, ordinary
from gputui.analysis.finding import Finding
from gputui.analysis.live_account import LiveAccount, since_capture
from gputui.analysis.memory import MemoryGrowth, memory_growth
from gputui.analysis.mfu import Utilisation
from gputui.analysis.roofline import Roof
from gputui.analysis.steps import (
    Outlier,
    StepStats,
    is_slow,
    is_warmup,
    outliers,
    phase_order,
    step_stats,
)
from gputui.client.hook import Disconnected, Event, Invalid
from gputui.protocol import messages
from gputui.protocol.capture import CaptureResult, CaptureStatus
from gputui.protocol.compile import CompileReport
from gputui.protocol.memsnap import MemorySnapshotResult, MemorySnapshotStatus
from gputui.protocol.profile import PythonProfile
from gputui.protocol.schema import (
    Hello,
    HookError,
    MemoryBatch,
    MemorySample,
    Status,
    StepBatch,
    StepRecord,
    Synced,
)
from gputui.session.evidence import STATS_WINDOW, job_utilisation
from gputui.session.evidence import evidence as session_evidence
from gputui.snapshot.model import DeviceSnapshot

#: steps kept for the bars, the history graph and the statistics
STEP_WINDOW = 2000
#: steps the percentiles and shares are computed over (the newest)
#: memory samples kept: ten minutes at the hook's 2 Hz
MEMORY_POINTS = 1200
#: samples of the job's GPU kept: two minutes at 1 Hz
GPU_POINTS = 120


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
    invalid: int  # messages that failed the schema (skipped)
    connect_error: str | None
    connecting: bool
    #: the job's GPU as NVML/GPM saw it while attached, oldest first
    gpu: tuple[DeviceSnapshot, ...] = ()
    #: why there are no GPU samples (no driver, a CPU job, GPU not found)
    gpu_reason: str | None = None
    #: the samples taken while no capture ran (what the analyzer reads)
    gpu_unprofiled: tuple[DeviceSnapshot, ...] = ()
    #: the training thread's newest Python profile (the hook's stack sampler)
    python_profile: PythonProfile | None = None
    #: the latest memory snapshot's progress and result (key m)
    memsnap_status: MemorySnapshotStatus | None = None
    memsnap: MemorySnapshotResult | None = None
    memsnap_wanted: str | None = None
    #: the job's GPU's ceilings (measured, else datasheet): the roofline's roof
    roof: Roof | None = None
    compile_report: CompileReport | None = None  # None: nothing compiled, or an old hook

    @property
    def memory_snapshot(self) -> MemorySnapshotResult | None:
        return self.memsnap


class AttachState:
    """Thread-safe accumulator of one attach session's events."""

    def __init__(self, step_window: int = STEP_WINDOW, memory_points: int = MEMORY_POINTS) -> None:
        self._lock = threading.Lock()
        self._step_window = step_window
        self._memory_points = memory_points
        #: called (on the reader thread, outside the lock) when a capture result
        #: arrives: the screen rebuilds at once instead of at its next tick
        self.on_capture: Callable[[], None] | None = None
        self.reset()

    def reset(self) -> None:
        """Forget everything (a replay starting over)."""
        with self._lock:
            self._version = 0
            self._hello: Hello | None = None
            self._steps: deque[StepRecord] = deque(maxlen=self._step_window)
            self._last_index = -1
            self._steps_received = 0
            self._missed = 0
            self._synced = False
            self._memory: deque[tuple[MemorySample, int | None]] = deque(maxlen=self._memory_points)
            self._status: Status | None = None
            self._capture_status: CaptureStatus | None = None
            self._capture: CaptureResult | None = None
            self._capture_wanted: str | None = None
            self._disconnected: Disconnected | None = None
            self._hook_messages: deque[str] = deque(maxlen=5)
            self._invalid = 0
            self._gpu: deque[DeviceSnapshot] = deque(maxlen=GPU_POINTS)
            #: the samples taken while no capture ran (a profiler slows the job and
            #: changes what the GPU does): what the analyzer reads
            self._gpu_unprofiled: deque[DeviceSnapshot] = deque(maxlen=GPU_POINTS)
            self._python_profile: PythonProfile | None = None
            self._compile_report: CompileReport | None = None
            self._gpu_reason: str | None = None
            self._connect_error: str | None = None
            self._connecting = False
            self._memsnap_status: MemorySnapshotStatus | None = None
            self._memsnap: MemorySnapshotResult | None = None
            self._roof: Roof | None = None
            self._memsnap_wanted: str | None = None

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

    def set_roof(self, roof: Roof | None) -> None:
        with self._lock:
            self._roof = roof
            self._version += 1

    def set_connecting(self, connecting: bool, error: str | None = None) -> None:
        with self._lock:
            self._connecting = connecting
            self._connect_error = error
            self._version += 1

    def add_gpu(self, device: DeviceSnapshot) -> None:
        """One sample of the job's GPU (from the GPU watch's thread, or a replay)."""
        with self._lock:
            self._gpu.append(device)
            status, wanted = self._capture_status, self._capture_wanted
            capturing = (status is not None and status.active) or (
                wanted is not None and (status is None or status.id != wanted)
            )
            if not capturing:
                self._gpu_unprofiled.append(device)
            self._version += 1

    def set_gpu_reason(self, reason: str | None) -> None:
        with self._lock:
            self._gpu_reason = reason

    def set_capture_wanted(self, capture_id: str | None) -> None:
        """This viewer asked for capture ``capture_id`` (its answer may already be
        here: the reader thread can deliver it before the request call returns)."""
        with self._lock:
            self._capture_wanted = _unanswered(capture_id, self._capture_status, self._capture)
            self._version += 1

    def set_memsnap_wanted(self, snapshot_id: str | None) -> None:
        """As :meth:`set_capture_wanted`, of memory snapshot ``snapshot_id``."""
        with self._lock:
            self._memsnap_wanted = _unanswered(snapshot_id, self._memsnap_status, self._memsnap)
            self._version += 1

    def add(self, event: Event) -> None:
        """Take one event (called on the reader thread)."""
        self._add(event)
        callback = self.on_capture
        if callback is not None and isinstance(event, CaptureResult):
            callback()

    def _add(self, event: Event) -> None:
        with self._lock:
            self._version += 1
            latest = _LATEST.get(type(event))
            if latest is not None:
                setattr(self, latest, event)
                self._forget_answered(event)
            elif isinstance(event, StepBatch):
                self._missed += event.missed
                for step in event.steps:
                    # A reconnect asks for history again: keep each step index once.
                    if step.index > self._last_index:
                        self._steps.append(step)
                        self._last_index = step.index
                        self._steps_received += 1
            elif isinstance(event, MemoryBatch):
                # each sample's own step (an older hook's say none: their growth is
                # judged over their times, analysis.memory)
                for sample in event.samples:
                    self._memory.append((sample, sample.step))
            elif isinstance(event, Synced):
                self._synced = True
            elif isinstance(event, HookError):
                self._hook_messages.append(event.error)
            elif isinstance(event, Invalid):
                self._invalid += 1
                self._hook_messages.append(
                    f"skipped an invalid {event.type} message: {event.error}"
                )

    def _forget_answered(self, event: Event) -> None:
        """No longer wait for the request that ``event`` answers (the lock held)."""
        if isinstance(event, Disconnected):
            self._capture_wanted = self._memsnap_wanted = None
        elif isinstance(event, CaptureResult) and event.id == self._capture_wanted:
            self._capture_wanted = None
        elif isinstance(event, (MemorySnapshotResult, MemorySnapshotStatus)):
            # an ended status without its result: refused, no result will come
            done = isinstance(event, MemorySnapshotResult) or event.ended
            if done and event.id == self._memsnap_wanted:
                self._memsnap_wanted = None

    # -- reader (UI thread) --------------------------------------------------------------
    def snapshot(self) -> StateSnapshot:
        """Each field of :class:`StateSnapshot` from the attribute of its name (a
        bounded series as a tuple)."""
        with self._lock:
            values = {name: getattr(self, "_" + name) for name in _SNAPSHOT_FIELDS}
            for name, value in values.items():
                if type(value) is deque:
                    values[name] = tuple(value)
        return StateSnapshot(**values)


_SNAPSHOT_FIELDS = tuple(f.name for f in dataclasses.fields(StateSnapshot))
#: the events of which the state keeps the newest, and the attribute it keeps it in
_LATEST: dict[type, str] = {
    Status: "_status",
    CaptureStatus: "_capture_status",
    CaptureResult: "_capture",
    MemorySnapshotStatus: "_memsnap_status",
    MemorySnapshotResult: "_memsnap",
    PythonProfile: "_python_profile",
    CompileReport: "_compile_report",
    Disconnected: "_disconnected",
}


def _unanswered(
    request_id: str | None,
    status: CaptureStatus | MemorySnapshotStatus | None,
    result: CaptureResult | MemorySnapshotResult | None,
) -> str | None:
    """``request_id``, unless its answer is here: its result, or its status saying
    it ended (refused, or failed)."""
    answered = (result is not None and result.id == request_id) or (
        status is not None and status.id == request_id and status.ended
    )
    return None if answered else request_id


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
class MemoryView:
    device: int
    total_bytes: int | None
    allocated: tuple[float, ...]
    reserved: tuple[float, ...]
    peak: tuple[float, ...]
    latest: MemorySample
    #: baseline growth of allocated bytes over the window (None: too few points)
    growth: MemoryGrowth | None

    @property
    def growing(self) -> bool:
        return self.growth is not None and self.growth.growing


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
    #: analyzer findings, ranked
    findings: tuple[Finding, ...] = field(default=())
    #: the step's time account over the statistics' steps (the capture's split)
    account: LiveAccount | None = None
    utilisation: Utilisation | None = None  # the MFU (analysis.mfu)
    #: what the capture shown cost the job, from its steps (None: no capture, or
    #: its steps are not in the history)
    capture_cost: CaptureCost | None = None

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
        stats, found, acct = previous.stats, previous.outliers, previous.account
    else:
        stats = step_stats(steps[-STATS_WINDOW:], ordinary_only=True)
        p50_now = stats.wall.p50 if stats.wall is not None else None
        found = outliers(steps, p50_now)
        acct = since_capture(ordinary(steps[-STATS_WINDOW:]), snap.capture, snap.python_profile)
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
        marks = (is_warmup(step.index), step.profiled, is_slow(step.wall, p50))
        cols.append(StepColumn(step.index, total, segs, *marks))
    history_wall = tuple(s.wall for s in steps)
    gpu_values = tuple(float(s.gpu_total) for s in steps if s.gpu_total is not None)
    memory = None
    if previous is not None and _same_tail(previous.snap.memory, snap.memory):
        memory = previous.memory
    elif snap.memory:
        memory = memory_view(snap, stats.steps_per_s)
    if previous is not None and previous.snap.capture is snap.capture:
        capture = previous.capture
    else:
        capture = None if snap.capture is None else CaptureView.of(snap.capture)
    cost = None
    if snap.capture is not None:
        kept = None
        if previous is not None and previous.snap.capture is snap.capture:
            kept = previous.capture_cost
        if kept is not None and kept.complete:
            cost = kept  # every step it cost is in: it no longer changes
        else:
            cost = capture_cost(snap.steps, snap.capture)
    if (
        reuse_stats
        and previous is not None
        and previous.snap.capture is snap.capture
        and previous.snap.hello is snap.hello
        and previous.snap.memsnap is snap.memsnap
    ):
        advice, util = previous.findings, previous.utilisation  # rules: once a second
    else:
        ev = evidence(snap)
        advice, util = tuple(analyze(ev)), job_utilisation(snap, ev.stats.steps_per_s)
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
        findings=advice,
        account=acct,
        utilisation=util,
        capture_cost=cost,
    )


def evidence(snap: StateSnapshot) -> JobEvidence:
    """What the analyzer reads of a session (:func:`gputui.session.evidence.evidence`)."""
    # GPU samples taken during a capture describe the profiler, not the job
    return session_evidence(dataclasses.replace(snap, gpu=snap.gpu_unprofiled))


def _same_tail(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """The same bounded series: as long, ending with the very same sample."""
    return len(a) == len(b) and (not a or a[-1] is b[-1])


def memory_view(snap: StateSnapshot, steps_per_s: float | None = None) -> MemoryView | None:
    if not snap.memory:
        return None
    latest, _ = snap.memory[-1]
    device = latest.device
    points = [(s, at) for s, at in snap.memory if s.device == device]
    total = None
    if snap.hello is not None and snap.hello.device is not None:
        total = snap.hello.device.total_memory_bytes
    return MemoryView(
        device=device,
        total_bytes=total,
        allocated=tuple(float(s.allocated) for s, _ in points),
        reserved=tuple(float(s.reserved) for s, _ in points),
        peak=tuple(float(s.peak_allocated) for s, _ in points),
        latest=latest,
        growth=memory_growth(points, steps_per_s),
    )


def capture_progress(snap: StateSnapshot) -> str | None:
    """One line on the capture under way (or the last one that ended without a
    result), else None."""
    status = snap.capture_status
    if status is None:
        if snap.capture_wanted:
            return "capture requested, waiting for the hook"
        return None
    done = snap.capture is not None and snap.capture.id == status.id
    if done and status.active:
        return None
    state = status.state
    if state == messages.CAPTURE_ARMED:
        return "capture armed: starts at the next step boundary"
    if state == messages.CAPTURE_WARMUP:
        return f"capture warm-up at step {status.step}"
    if state == messages.CAPTURE_RECORDING:
        wanted = status.steps
        last = snap.steps[-1].index if snap.steps else None
        if wanted is not None and status.step is not None and last is not None:
            got = max(0, min(wanted, last - status.step + 1))
            return f"capture recording: step {got}/{wanted} (from step {status.step})"
        return f"capture recording from step {status.step}"
    if state == messages.CAPTURE_PROCESSING:
        return "capture processing: stopping the profiler, reducing the trace"
    reason = f": {status.reason}" if status.reason else ""
    return f"capture {state.replace('_', ' ')}{reason}"


def capture_busy(snap: StateSnapshot) -> bool:
    """A capture asked for by this viewer, or under way for anyone, has no result
    yet (a second one would be refused)."""
    status = snap.capture_status
    done = snap.capture is not None and status is not None and snap.capture.id == status.id
    return bool(snap.capture_wanted) or (status is not None and status.active and not done)
