"""The one place a session's messages become the analyzer's evidence.

The attach screen, ``attach --once``, ``--replay`` and the rank view all hold
the same things of a job -- its hello and status, its steps, memory samples,
latest capture, memory snapshot, GPU samples and roof -- and hand them here, so
a rule sees the same evidence wherever it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gputui.analysis.evidence import GPU_WINDOW, JobEvidence, job_evidence
from gputui.analysis.mfu import Utilisation, utilisation
from gputui.analysis.roofline import MEASURED, Roof
from gputui.ceilings.datasheet import datasheet_for
from gputui.protocol.capture import CaptureResult
from gputui.protocol.compile import CompileReport
from gputui.protocol.memsnap import MemorySnapshotResult
from gputui.protocol.profile import PythonProfile
from gputui.protocol.schema import Hello, MemorySample, Status, StepRecord
from gputui.snapshot.model import DeviceSnapshot

#: steps the statistics and the rules look at (the newest)
STATS_WINDOW = 1000


class JobRecord(Protocol):
    """What a session holds of one job: the attach model's snapshot, the one-shot
    report's :class:`~gputui.session.oneshot.Collected` and a rank's input all are."""

    @property
    def hello(self) -> Hello | None: ...
    @property
    def status(self) -> Status | None: ...
    @property
    def steps(self) -> Sequence[StepRecord]: ...
    @property
    def memory(self) -> Sequence[tuple[MemorySample, int | None]]: ...
    @property
    def capture(self) -> CaptureResult | None: ...
    @property
    def gpu(self) -> Sequence[DeviceSnapshot]: ...
    @property
    def memory_snapshot(self) -> MemorySnapshotResult | None: ...
    @property
    def roof(self) -> Roof | None: ...
    @property
    def python_profile(self) -> PythonProfile | None: ...
    @property
    def compile_report(self) -> CompileReport | None: ...


def evidence(
    job: JobRecord, *, window: int = STATS_WINDOW, gpu_window: int = GPU_WINDOW
) -> JobEvidence:
    """What the analyzer reads of one job: its newest ``window`` steps, its
    memory, latest capture and memory snapshot, and its GPU over the newest
    ``gpu_window`` samples."""
    hello, status = job.hello, job.status
    device = hello.device if hello is not None else None
    sheet = datasheet_for(device.name if device is not None else None)
    if hello is not None and not hello.cuda_in_use:
        sheet = None
    return job_evidence(
        job.steps[-window:],
        job.memory,
        job.capture,
        job.gpu[-gpu_window:],
        cuda=bool(hello is not None and hello.cuda_in_use),
        phases_coarse=bool(status is not None and status.phases_coarse),
        batch_size=None if status is None else status.batch_size,
        device_total_bytes=None if device is None else device.total_memory_bytes,
        window=window,
        loader=None if status is None else status.loader,
        frameworks=() if status is None else status.frameworks,
        cpus=None if hello is None else hello.cpus,
        memory_snapshot=job.memory_snapshot,
        roof=job.roof,
        python_profile=job.python_profile,
        compile_report=job.compile_report,
        datasheet=None if sheet is None else sheet.roof(),
    )


def job_utilisation(job: JobRecord, steps_per_s: float | None) -> Utilisation | None:
    """The job's MFU (analysis.mfu) from its newest capture with FLOPs and the
    rate of its ordinary steps: against the datasheet's peak of its GPU (never
    the measured one), with the share of ``gputui bench``'s ceiling beside it."""
    hello = job.hello
    device = hello.device if hello is not None else None
    name = device.name if device is not None else None
    if hello is not None and not hello.cuda_in_use:
        name = "a CPU job"
    sheet = datasheet_for(name)
    roof = job.roof
    measured = roof if roof is not None and roof.source == MEASURED else None
    return utilisation(
        job.capture, steps_per_s, name, None if sheet is None else sheet.roof(), measured
    )
