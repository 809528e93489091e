"""Every hooked training job of this node, followed for the exporter.

The only exporter module that talks to hooks.  A watcher thread lists the hook
sockets every few seconds, connects to each new job as one more viewer, and
keeps running totals (steps, phase seconds, samples, memory) that
:meth:`JobWatcher.snapshot` hands out as frozen :class:`JobSnapshot` values.  A
job that exits (its connection closes, or its socket is gone at the next scan)
is dropped at once, so it is absent from the next scrape.

What it uses of the viewer side of the hook protocol, and nothing else:

- ``gputui.protocol.list_sockets() -> {pid: path}``
- ``HookClient.connect(pid, timeout)`` (raises ``GputuiError`` subclasses) and
  the typed :class:`~gputui.protocol.hello.Hello` it validated:
  ``argv, rank, local_rank, world_size, device.index, run_id, master``;
  ``client.subscribe(history, memory)``, ``client.start(on_event=...)``,
  ``client.close()``
- events ``StepBatch.steps`` of ``StepRecord.{wall, phases, gpu, samples, t, flags}``,
  ``MemoryBatch.samples`` of ``MemorySample.{allocated, reserved,
  peak_allocated, alloc_retries, ooms}``, and ``Disconnected``.

The job id is what every rank of one job shares: the hello's ``run_id``
(torchrun's ``TORCHELASTIC_RUN_ID``), else its rendezvous ``master``
(``MASTER_ADDR:MASTER_PORT``), else host and pid.  Hooks older than those hello
fields are read from the job's own environment (``/proc/<pid>/environ``; hooks
are per user, so the job is ours).
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gputui.analysis.mfu import Utilisation, utilisation
from gputui.ceilings.datasheet import datasheet_for
from gputui.client.hook import Disconnected, HookClient
from gputui.errors import GputuiError
from gputui.host.attribution import ContainerAttributor
from gputui.host.processes import read_environ
from gputui.protocol import list_sockets
from gputui.protocol.capture import CaptureResult
from gputui.protocol.messages import StepFlag
from gputui.protocol.schema import MemoryBatch, StepBatch
from gputui.snapshot.model import ContainerInfo, SlurmJob

#: step durations kept per job for the summary's quantiles
RECENT_STEPS = 256
#: distinct phase names kept per job; later ones are counted as "other"
MAX_PHASES = 32
MAX_PHASE_CHARS = 64
#: a job whose hook would not answer is tried again after this long
RETRY_AFTER_S = 10.0
#: steps whose time says nothing of the job's pace: profiled, compiling
NOT_TIMED = int(StepFlag.PROFILED | StepFlag.COMPILE)
LOOPBACK = ("localhost", "127.0.0.1", "::1", "ip6-localhost")


@dataclass(frozen=True)
class JobMemory:
    allocated_bytes: int
    reserved_bytes: int
    peak_allocated_bytes: int
    alloc_retries: int
    ooms: int


@dataclass(frozen=True)
class JobSnapshot:
    """One hooked job (one rank) as the exporter saw it, since it connected."""

    pid: int
    job_id: str
    rank: int
    local_rank: int
    world_size: int
    argv: tuple[str, ...]
    device_index: int | None
    steps_total: int
    step_seconds_sum: float
    #: the last few unprofiled step durations, oldest first (seconds)
    recent_step_seconds: tuple[float, ...]
    phase_seconds: Mapping[str, float]
    #: GPU time per phase, when the job times its steps on the GPU
    phase_gpu_seconds: Mapping[str, float]
    samples_total: int
    last_step_time_s: float | None
    memory: JobMemory | None
    #: the container and pod the job runs in (None: on the host, or not known)
    container: ContainerInfo | None = None
    #: the Slurm job step it runs in (None: outside Slurm, or not known)
    slurm: SlurmJob | None = None
    #: the GPU's UUID as NVML names it (the join with the GPU series; the
    #: index is the job's own CUDA numbering, not NVML's)
    device_uuid: str | None = None
    #: the job's MFU from the newest capture with FLOPs anyone asked for
    utilisation: Utilisation | None = None


def job_id_for(environ: Mapping[str, str], hostname: str, pid: int) -> str:
    """The id shared by every rank of one job: the elastic run id, else the
    rendezvous address, else this host and pid (a job of one process)."""
    return _job_id(
        environ.get("TORCHELASTIC_RUN_ID", ""),
        environ.get("MASTER_ADDR", "").strip(),
        environ.get("MASTER_PORT", "").strip(),
        hostname,
        pid,
    )


def job_id_of(
    hello: Any, hostname: str, pid: int, environ_of: Callable[[int], Mapping[str, str]]
) -> str:
    """The job id from the hello's launcher fields; the job's environment when
    its hook predates them."""
    run_id = getattr(hello, "run_id", None)
    master = getattr(hello, "master", None)
    if run_id is None and master is None:
        return job_id_for(environ_of(pid), hostname, pid)
    addr, _, port = (master or "").rpartition(":")
    return _job_id(run_id or "", addr.strip("[]"), port, hostname, pid)


def _job_id(run_id: str, addr: str, port: str, hostname: str, pid: int) -> str:
    run_id = run_id.strip()
    if run_id and run_id.lower() != "none":
        return run_id
    if addr and port:
        # a loopback rendezvous is one node's job: qualify it with the node
        if addr in LOOPBACK or addr.startswith("127."):
            addr = hostname
        return f"{addr}:{port}"
    return f"{hostname}/{pid}"


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


class _Job:
    """Running totals of one connection; written on its reader thread."""

    def __init__(
        self,
        pid: int,
        client: Any,
        job_id: str,
        container: ContainerInfo | None = None,
        slurm: SlurmJob | None = None,
    ) -> None:
        hello = client.hello
        self.pid = pid
        self.container = container
        self.slurm = slurm
        self.client = client
        self.job_id = job_id
        self.rank = _int(hello.rank, 0)
        self.local_rank = _int(hello.local_rank, 0)
        self.world_size = _int(hello.world_size, 1)
        self.argv = tuple(str(a) for a in hello.argv)
        index = getattr(hello.device, "index", None)
        self.device_index = _int(index, -1) if index is not None else None
        uuid = getattr(hello.device, "uuid", None)
        self.device_uuid = uuid if isinstance(uuid, str) and uuid else None
        self.steps = 0
        self.step_sum = 0.0
        self.recent: collections.deque[float] = collections.deque(maxlen=RECENT_STEPS)
        self.phases: dict[str, float] = {}
        self.gpu_phases: dict[str, float] = {}
        self.samples = 0
        self.last_step_t: float | None = None
        self.memory: JobMemory | None = None
        self.gpu_name = getattr(hello.device, "name", None)
        self.flops_capture: CaptureResult | None = None

    def add_steps(self, batch: StepBatch) -> None:
        for step in batch.steps:
            wall = float(step.wall)
            self.steps += 1
            self.step_sum += wall
            if not (int(step.flags) & NOT_TIMED):
                self.recent.append(wall)
            _accumulate(self.phases, step.phases)
            if step.gpu:
                _accumulate(self.gpu_phases, step.gpu)
            if step.samples:
                self.samples += int(step.samples)
            self.last_step_t = float(step.t)

    def add_memory(self, batch: MemoryBatch) -> None:
        if batch.samples:
            s = batch.samples[-1]
            self.memory = JobMemory(
                int(s.allocated),
                int(s.reserved),
                int(s.peak_allocated),
                int(s.alloc_retries),
                int(s.ooms),
            )

    def utilisation(self) -> Utilisation | None:
        cap = self.flops_capture
        if cap is None:
            return None
        seconds = math.fsum(self.recent)
        rate = len(self.recent) / seconds if seconds > 0 else None
        sheet = datasheet_for(self.gpu_name)
        return utilisation(cap, rate, self.gpu_name, None if sheet is None else sheet.roof())

    def snapshot(self) -> JobSnapshot:
        return JobSnapshot(
            pid=self.pid,
            job_id=self.job_id,
            rank=self.rank,
            local_rank=self.local_rank,
            world_size=self.world_size,
            argv=self.argv,
            device_index=self.device_index,
            steps_total=self.steps,
            step_seconds_sum=self.step_sum,
            recent_step_seconds=tuple(self.recent),
            phase_seconds=dict(self.phases),
            phase_gpu_seconds=dict(self.gpu_phases),
            samples_total=self.samples,
            last_step_time_s=self.last_step_t,
            memory=self.memory,
            container=self.container,
            slurm=self.slurm,
            device_uuid=self.device_uuid,
            utilisation=self.utilisation(),
        )


def _accumulate(totals: dict[str, float], phases: Mapping[str, float]) -> None:
    for name, seconds in phases.items():
        key = str(name)[:MAX_PHASE_CHARS]
        if key not in totals and len(totals) >= MAX_PHASES:
            key = "other"
        totals[key] = totals.get(key, 0.0) + float(seconds)


class JobWatcher:
    """Finds hooked jobs, follows each one, forgets it when it goes.

    Everything that can block (listing sockets, connecting) runs on the watcher's
    own thread with a timeout; each connection's events arrive on that
    connection's reader thread.  ``snapshot()`` only copies totals under a lock.
    """

    def __init__(
        self,
        hostname: str,
        scan_interval_s: float = 2.0,
        connect_timeout_s: float = 1.0,
        connect: Callable[[int, float], Any] = HookClient.connect,
        list_jobs: Callable[[], Mapping[int, str]] = list_sockets,
        environ_of: Callable[[int], Mapping[str, str]] = read_environ,
        container_of: Callable[[int], ContainerInfo | None] | None = None,
        slurm_of: Callable[[int], SlurmJob | None] | None = None,
    ) -> None:
        self.hostname = hostname
        if container_of is None or slurm_of is None:
            attributor = ContainerAttributor()
            container_of = container_of or attributor.lookup
            slurm_of = slurm_of or attributor.job_of
        self._container_of = container_of
        self._slurm_of = slurm_of
        self.scan_interval_s = scan_interval_s
        self.connect_timeout_s = connect_timeout_s
        self._connect = connect
        self._list_jobs = list_jobs
        self._environ_of = environ_of
        self._lock = threading.Lock()
        self._jobs: dict[int, _Job] = {}
        self._retry_at: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.scans = 0
        self.scan_errors = 0
        self.last_scan_s: float | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gputui-jobs", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        with self._lock:
            jobs, self._jobs = list(self._jobs.values()), {}
        for job in jobs:
            _close(job.client)

    def snapshot(self) -> tuple[JobSnapshot, ...]:
        with self._lock:
            return tuple(self._jobs[pid].snapshot() for pid in sorted(self._jobs))

    def _run(self) -> None:
        while not self._stop.is_set():
            start = time.monotonic()
            try:
                self.scan()
            except Exception:  # a scan must never end the thread: count it, go on
                self.scan_errors += 1
            self.last_scan_s = time.monotonic() - start
            self._stop.wait(self.scan_interval_s)

    def scan(self) -> None:
        """One pass: drop jobs whose socket is gone, connect to new ones."""
        pids = set(self._list_jobs())
        self.scans += 1
        with self._lock:
            gone = [job for pid, job in self._jobs.items() if pid not in pids]
            for job in gone:
                del self._jobs[job.pid]
            known = set(self._jobs)
        for job in gone:
            _close(job.client)
        now = time.monotonic()
        for pid in sorted(pids - known):
            if self._stop.is_set():
                return
            if self._retry_at.get(pid, 0.0) > now:
                continue
            self._follow(pid)
        for pid in [p for p in self._retry_at if p not in pids]:
            del self._retry_at[pid]

    def _follow(self, pid: int) -> None:
        try:
            client = self._connect(pid, self.connect_timeout_s)
        except (GputuiError, OSError):
            self._retry_at[pid] = time.monotonic() + RETRY_AFTER_S
            return
        job_id = job_id_of(client.hello, self.hostname, pid, self._environ_of)
        job = _Job(pid, client, job_id, self._container_of(pid), self._slurm_of(pid))
        with self._lock:
            self._jobs[pid] = job
        try:
            client.subscribe(history=0, memory=True)
            client.start(on_event=lambda event: self._on_event(job, event))
        except (GputuiError, OSError):
            self._forget(job)
            self._retry_at[pid] = time.monotonic() + RETRY_AFTER_S

    def _on_event(self, job: _Job, event: object) -> None:
        if isinstance(event, StepBatch):
            with self._lock:
                job.add_steps(event)
        elif isinstance(event, MemoryBatch):
            with self._lock:
                job.add_memory(event)
        elif isinstance(event, CaptureResult):
            if event.options.flops and not event.error:
                with self._lock:
                    job.flops_capture = event
        elif isinstance(event, Disconnected):
            self._forget(job)

    def _forget(self, job: _Job) -> None:
        with self._lock:
            if self._jobs.get(job.pid) is job:
                del self._jobs[job.pid]
        _close(job.client)


def _close(client: Any) -> None:
    with contextlib.suppress(Exception):  # already closed, or the peer is gone
        client.close()


def current_hostname() -> str:
    return os.uname().nodename
