"""A one-shot look at a hooked job (``attach --once``, ``--replay FILE --once``,
the rank view's ``--once``): its history read until the hook says it is all
sent, an optional capture, the job's GPU sampled meanwhile, folded into one
:class:`Collected` that :mod:`gputui.reports.attach` prints."""

from __future__ import annotations

import sys
import time
from typing import Any

from gputui import fmt
from gputui.analysis.engine import analyze
from gputui.analysis.evidence import (
    GPU_WINDOW,
    MIN_GPU_SAMPLES,
    MIN_STEPS,
    findings_waiting,
    ordinary,
    roofline_of,
)
from gputui.analysis.finding import Finding
from gputui.analysis.live_account import LiveAccount, since_capture
from gputui.analysis.mfu import Utilisation
from gputui.analysis.roofline import Roof, RooflineReport
from gputui.analysis.steps import StepStats, step_stats
from gputui.ceilings.cache import roof_for
from gputui.client.hook import AttachError, Disconnected, Event, HookClient, Invalid
from gputui.protocol.capture import CaptureResult, CaptureStatus
from gputui.protocol.compile import CompileReport
from gputui.protocol.memsnap import MemorySnapshotResult
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
from gputui.session.evidence import evidence, job_utilisation
from gputui.snapshot.model import DeviceSnapshot

#: how long the hook may take to send its history
SYNC_TIMEOUT_S = 10.0
#: memory samples kept for the growth estimate
MEMORY_POINTS = 1200


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
            # each sample's own step; an older hook's batch: the newest step seen
            at = self.steps[-1].index if self.steps else None
            self.memory.extend((s, at if s.step is None else s.step) for s in event.samples)
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

    @property
    def latest_memory(self) -> MemorySample | None:
        return self.memory[-1][0] if self.memory else None

    def findings(self, window: int) -> list[Finding]:
        """The analyzer's findings over the newest ``window`` steps, ranked."""
        ev = evidence(self, window=window)
        return analyze(ev)

    def live_account(self, window: int) -> LiveAccount | None:
        """The step's account over the newest ``window`` ordinary steps: data,
        user phases and communication from every step, the rest split as the
        capture measured it."""
        return since_capture(ordinary(self.steps[-window:]), self.capture)

    def utilisation(self, window: int) -> Utilisation | None:
        """The job's MFU from its capture with FLOPs and the rate of its
        ordinary steps in the window (analysis.mfu)."""
        if self.capture is None or not self.capture.options.flops:
            return None
        return job_utilisation(self, evidence(self, window=window).stats.steps_per_s)

    @property
    def roofline(self) -> RooflineReport | None:
        return roofline_of(self.capture.op_rows if self.capture else (), self.roof)

    def analysis_notes(self, stats: StepStats) -> list[str]:
        """What the analyzer could not look at, so a short list reads right."""
        notes = []
        if stats.count < MIN_STEPS:
            notes.append(findings_waiting(stats.count))
        if self.hello.cuda_in_use and len(self.gpu) < MIN_GPU_SAMPLES:
            why = f" ({self.gpu_note})" if self.gpu_note else ""
            notes.append(f"GPU rules need {MIN_GPU_SAMPLES} samples of the job's GPU{why}")
        if self.capture is None:
            notes.append("kernel-level rules need a capture: --capture N")
        return notes


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


def capture_live(
    client: HookClient, got: Collected, request: dict[str, Any], timeout: float, quiet: bool
) -> None:
    """Ask for a capture and wait for its result (raises AttachError on failure)."""
    cid = client.request_capture(**request)
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        event = client.get(timeout=remaining) if remaining > 0 else None
        if event is None:
            try:
                client.cancel_capture()
            except AttachError:
                pass
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
            if not quiet:
                where = "" if event.step is None else f" at step {event.step}"
                print(f"capture: {event.state}{where}", file=sys.stderr)
        if isinstance(event, CaptureResult):
            if event.error:
                raise JobFailed(f"gputui attach: capture failed: {fmt.clean(event.error)}")
            return


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


# -- the report ----------------------------------------------------------------------------------
def stats_of(got: Collected, window: int) -> StepStats:
    return step_stats(got.steps[-window:])
