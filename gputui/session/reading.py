"""What a one-shot look at a hooked job reads, and how: its events folded into
one :class:`Collected` (from a live hook, a recording, or a rank's state), its
history read until the hook says it is all sent, its Python profile, a capture
or a memory snapshot waited for, its GPU sampled meanwhile.
:mod:`gputui.session.oneshot` puts these together for ``attach --once``, the
rank view's ``--once`` and ``--memory-snapshot``."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from gputui import fmt
from gputui.analysis.evidence import GPU_WINDOW, MIN_GPU_SAMPLES
from gputui.analysis.roofline import Roof
from gputui.ceilings.cache import roof_for
from gputui.client.hook import AttachError, Disconnected, Event, HookClient, Invalid, parse_event
from gputui.errors import GputuiError
from gputui.protocol import memsnap as ms
from gputui.protocol.capture import CaptureResult, CaptureStatus
from gputui.protocol.compile import CompileReport
from gputui.protocol.memsnap import MemorySnapshotResult, MemorySnapshotStatus
from gputui.protocol.messages import CAPTURE_ARMED
from gputui.protocol.profile import PythonProfile
from gputui.protocol.requests import CaptureRequest
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
from gputui.recording.attach import gpu_sample
from gputui.snapshot.model import DeviceSnapshot

if TYPE_CHECKING:
    from gputui.session.attach import StateSnapshot

#: the longest wait for a job's hello, whatever --timeout allows for a capture
HELLO_TIMEOUT_S = 10.0
#: how long the hook may take to send its history
SYNC_TIMEOUT_S = 10.0
#: memory samples kept for the growth estimate
MEMORY_POINTS = 1200


class EventSink(Protocol):
    """What takes a job's events: :class:`Collected`, and the attach model's state."""

    def add(self, event: Event) -> None: ...
    def add_gpu(self, sample: DeviceSnapshot) -> None: ...


def deliver(msg: Mapping[str, Any], sink: EventSink) -> None:
    """One recorded message to ``sink``: the job's GPU as the recording viewer
    sampled it, or the hook's event (a damaged message becomes an Invalid event:
    skipped, and counted, as live)."""
    sample = gpu_sample(msg)
    if sample is not None:
        sink.add_gpu(sample)
        return
    event = parse_event(msg)
    if event is not None:
        sink.add(event)


class JobFailed(AttachError):
    """The job went away, or its capture failed or was refused: the command did
    its part, the job did not (exit status 1, not the 2 of a usage error)."""

    exit_code = 1


class Collected:
    """What the report is made of: the events seen, folded."""

    def __init__(self, hello: Hello) -> None:
        self.hello = hello
        self.steps: list[StepRecord] = []
        self.missed = 0
        self.status: Status | None = None
        self.memory: list[tuple[MemorySample, int | None]] = []
        self.capture: CaptureResult | None = None
        #: the job's GPU as NVML saw it while attached (or as recorded)
        self.gpu: list[DeviceSnapshot] = []
        #: why there are no GPU samples, when there are none
        self.gpu_note: str | None = None
        self.memory_snapshot: MemorySnapshotResult | None = None
        #: the training thread's newest Python profile (the hook's stack sampler),
        #: and why there is none
        self.python_profile: PythonProfile | None = None
        #: what torch.compile did (None: nothing compiled, or an older hook)
        self.compile_report: CompileReport | None = None
        self.profile_note: str | None = None
        self.disconnected: Disconnected | None = None
        self.problems: list[str] = []  # hook errors, invalid messages
        #: the job's GPU's ceilings (measured by gputui bench, else the datasheet)
        device = hello.device
        self.roof: Roof | None = None if device is None else roof_for(device.uuid, device.name)

    def add(self, event: Event) -> None:
        if isinstance(event, StepBatch):
            self.steps.extend(event.steps)
            self.missed += event.missed
        elif isinstance(event, Status):
            self.status = event
        elif isinstance(event, MemoryBatch):
            # each sample's own step (an older hook's say none: their growth is
            # judged over their times, analysis.memory)
            self.memory.extend((s, s.step) for s in event.samples)
            del self.memory[:-MEMORY_POINTS]
        elif isinstance(event, CaptureResult):
            self.capture = event
        elif isinstance(event, MemorySnapshotResult):
            self.memory_snapshot = event
        elif isinstance(event, PythonProfile):
            self.python_profile = event
        elif isinstance(event, CompileReport):
            self.compile_report = event
        elif isinstance(event, Disconnected):
            self.disconnected = event
        elif isinstance(event, HookError):
            self.problems.append(f"hook: {event.error}")
        elif isinstance(event, Invalid):
            self.problems.append(f"skipped an invalid {event.type} message: {event.error}")

    def add_gpu(self, sample: DeviceSnapshot) -> None:
        self.gpu.append(sample)
        del self.gpu[:-GPU_WINDOW]

    @classmethod
    def of_recording(cls, hello: Hello, messages: Iterable[tuple[float, Any]]) -> Collected:
        """A recorded session's messages folded, as if attached when it ended: the
        hook's events and the job's GPU as the recording viewer sampled it."""
        got = cls(hello)
        for _t, msg in messages:
            deliver(msg, got)
        if not got.gpu and hello.cuda_in_use:
            got.gpu_note = "the recording holds no samples of the job's GPU"
        return got

    @classmethod
    def of_history(cls, hello: Hello, snap: StateSnapshot) -> Collected:
        """What a one-shot read of a rank's hook collects (its history: steps,
        status, memory samples, latest capture), taken from the rank's state in
        the rank view's recording."""
        got = cls(hello)
        got.steps = list(snap.steps)
        got.status = snap.status
        got.memory = list(snap.memory)
        got.capture = snap.capture
        return got

    @property
    def latest_memory(self) -> MemorySample | None:
        return self.memory[-1][0] if self.memory else None


# -- collecting -------------------------------------------------------------------------------
def collect_live(
    client: HookClient, window: int, timeout: float, got: Collected | None = None
) -> Collected:
    """Subscribe and read the job's history until the hook says it is all sent."""
    got = got or Collected(client.hello)
    client.subscribe(history=window, memory=True)
    client.start()
    deadline = time.monotonic() + min(timeout, SYNC_TIMEOUT_S)
    while True:
        event = client.get(timeout=max(0.0, deadline - time.monotonic()))
        if event is None:
            raise JobFailed(
                f"gputui attach: job {client.pid} did not send its history within "
                f"{min(timeout, SYNC_TIMEOUT_S):g} s"
            )
        got.add(event)
        if isinstance(event, Disconnected):
            raise JobFailed(
                f"gputui attach: job {client.pid} exited while sending its history "
                f"({fmt.clean(event.reason)})"
            )
        if isinstance(event, Synced):
            return got


#: how long a one-shot report waits for the Python profile it asked for
PROFILE_TIMEOUT_S = 3.0


def profile_live(client: HookClient, got: Collected, timeout: float = PROFILE_TIMEOUT_S) -> None:
    """Ask for the training thread's Python profile and wait for it (a little:
    the hook sends what its sampler has kept, up to the last minute).  Why there
    is none goes to ``got.profile_note``."""
    why = client.profile_unavailable()
    if why is not None:
        got.profile_note = why
        return
    if got.python_profile is not None:
        return
    client.request_profile()
    deadline = time.monotonic() + timeout
    while (remaining := deadline - time.monotonic()) > 0:
        event = client.get(timeout=remaining)
        if event is None:
            break
        got.add(event)
        if isinstance(event, (PythonProfile, Disconnected, HookError)):
            break  # the profile, or the answer that there is none
    if got.python_profile is None:
        got.profile_note = client.profile_unavailable() or (
            f"the job sent no Python profile within {timeout:g} s"
        )


#: how often a capture that has not begun asks whether the job has stalled
STALL_CHECK_S = 1.0


def capture_live(
    client: HookClient,
    got: Collected,
    request: CaptureRequest,
    timeout: float,
    quiet: bool,
    stalled: Callable[[], str | None] | None = None,
) -> None:
    """Ask for a capture and wait for its result (raises AttachError on failure).
    ``stalled``, when given, says why the job has stopped stepping (None while
    it steps): a capture that has not begun (armed, at a step the job does not
    reach) is then cancelled at once, not waited for until ``timeout``."""
    cid = client.request_capture(
        steps=request.steps,
        warmup=request.warmup,
        shapes=request.shapes,
        stacks=request.stacks,
        memory=request.memory,
        flops=request.flops,
        start_step=request.start_step,
        capture_id=request.id,
        auto=request.auto,
    )
    deadline = time.monotonic() + timeout
    begun = False  # (the profiler runs: its steps may be slow, not stalled)
    next_check = time.monotonic() + STALL_CHECK_S
    while True:
        now = time.monotonic()
        remaining = deadline - now
        check = None if begun else stalled
        if check is not None and now >= next_check:
            next_check = now + STALL_CHECK_S
            why = check()
            if why is not None:
                _cancel(client)
                raise JobFailed(f"gputui attach: not taken: {why}")
        wait = remaining if check is None else min(remaining, max(0.0, next_check - now))
        event = client.get(timeout=wait) if remaining > 0 else None
        if event is None:
            if remaining > 0 and check is not None:
                continue  # (time to ask again whether the job has stalled)
            _cancel(client)
            raise JobFailed(
                f"gputui attach: the capture did not finish within {timeout:g} s "
                "(is the job still stepping?)"
            )
        if isinstance(event, CaptureResult) and event.id != cid:
            continue  # someone else's capture (or a replay of an older one)
        got.add(event)
        if isinstance(event, Disconnected):
            raise JobFailed(
                f"gputui attach: job {client.pid} exited before the capture finished "
                f"({fmt.clean(event.reason)})"
            )
        if isinstance(event, CaptureStatus) and event.id == cid:
            if event.ended:
                reason = fmt.clean(event.reason or "no reason given")
                raise JobFailed(f"gputui attach: capture {event.state}: {reason}")
            begun = begun or event.state != CAPTURE_ARMED
            if not quiet:
                where = "" if event.step is None else f" at step {event.step}"
                print(f"capture: {event.state}{where}", file=sys.stderr)
        if isinstance(event, CaptureResult):
            if event.error:
                raise JobFailed(f"gputui attach: capture failed: {fmt.clean(event.error)}")
            return


def _cancel(client: HookClient) -> None:
    """Cancel the capture asked for, where it has not begun (never raises)."""
    try:
        client.cancel_capture()
    except AttachError:
        pass


def snapshot_live(
    client: HookClient, steps: int, max_entries: int, timeout: float, quiet: bool
) -> MemorySnapshotResult:
    """Ask for a memory snapshot and wait for its result.  A job that cannot take
    one (no CUDA, an old torch) is a usage error (exit 2); a busy, refused or
    failed one, a job that exits or stops stepping, exit 1."""
    client.start()
    sid = client.request_memory_snapshot(steps, max_entries)
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        event = client.get(timeout=remaining) if remaining > 0 else None
        if event is None:
            raise JobFailed(
                f"gputui attach: the memory snapshot did not finish within {timeout:g} s "
                "(is the job still stepping?)"
            )
        if isinstance(event, Disconnected):
            raise JobFailed(
                f"gputui attach: job {client.pid} exited before the memory snapshot finished "
                f"({fmt.clean(event.reason)})"
            )
        if isinstance(event, HookError):
            if "unknown request type" in event.error:
                raise JobFailed(
                    f"gputui attach: the gputui hook in job {client.pid} does not take memory "
                    "snapshots (an older version): restart the job with this gputui"
                )
            raise JobFailed(f"gputui attach: hook: {fmt.clean(event.error)}")
        if isinstance(event, MemorySnapshotStatus) and event.id == sid:
            if event.ended:
                reason = fmt.clean(event.reason or "no reason given")
                if event.state == ms.UNSUPPORTED:
                    raise GputuiError(f"gputui attach: {reason}")
                raise JobFailed(f"gputui attach: memory snapshot {event.state}: {reason}")
            if not quiet:
                where = "" if event.step is None else f" from step {event.step}"
                print(f"memory snapshot: {event.state}{where}", file=sys.stderr)
        if isinstance(event, MemorySnapshotResult) and event.id == sid:
            if event.error:
                raise JobFailed(f"gputui attach: memory snapshot failed: {fmt.clean(event.error)}")
            return event


class GpuSampling:
    """The job's GPU (by the UUID its hook reports) sampled while the report is
    collected, for the analyzer's GPU rules: started before the history is read,
    so the two overlap; :meth:`finish` waits out the rest of ``seconds``.
    Nothing to sample (a CPU job, no driver) is said in ``got.gpu_note``."""

    def __init__(self, got: Collected, seconds: float, open_collector: Any = None) -> None:
        from gputui.nvml.gpu_watch import GpuWatch

        self.got = got
        self.seconds = seconds
        self.watch: GpuWatch | None = None
        self.started = time.monotonic()
        hello = got.hello
        if not hello.cuda_in_use or hello.device is None:
            got.gpu_note = "the job uses no CUDA device"
        elif seconds <= 0:
            got.gpu_note = "not sampled (--gpu-seconds 0)"
        else:
            # MIN_GPU_SAMPLES readings with rates need one more reading (GPM
            # and PCIe rates are differences)
            self.watch = GpuWatch(
                hello.device.uuid,
                hello.device.index,
                interval_s=max(0.1, seconds / MIN_GPU_SAMPLES),
                open_collector=open_collector,
            )
            self.watch.start()

    def finish(self) -> None:
        """Wait out the sampling window and keep the samples (once: a second call
        does nothing)."""
        watch = self.watch
        if watch is None:
            return
        self.watch = None
        deadline = self.started + self.seconds + 0.15
        try:
            while watch.running and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            watch.stop()
        for sample in watch.samples():
            self.got.add_gpu(sample)
        self.got.gpu_note = watch.reason
