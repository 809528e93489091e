"""Typed messages between the hook and its viewers (standard library only).

Each message is a frozen dataclass with ``from_wire(obj)`` (checks every field's
type and range and raises :class:`SchemaError` naming the field) and
``to_wire()`` (the JSON object, with ``v`` and ``type``).  :func:`decode` turns
any received frame into its message.  The hook, the viewer's client, the attach
screen, ``attach --once``, the recorder and the exporter all use these classes,
so the shape of a message is written down once.

Wire keys are kept as the first protocol version sent them (recordings of that
version still replay); Python names add units where the wire is terse.  Capture
messages (status and result with their table rows) are in
:mod:`gputui.protocol.capture`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gputui.protocol import fields as f
from gputui.protocol import messages as m
from gputui.protocol.fields import MAX_PID, MAX_TIME_S, SchemaError

__all__ = ["SchemaError"]

StepFlag = m.StepFlag


def _typed(obj: Any, kind: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise SchemaError(kind, "expected a JSON object")
    return obj


def _head(kind: str) -> dict[str, Any]:
    return {"v": m.PROTOCOL_VERSION, "type": kind}


# -- hello and status ----------------------------------------------------------------------------
@dataclass(frozen=True)
class DeviceInfo:
    """The CUDA device the job's training thread uses."""

    index: int
    name: str | None = None
    total_memory_bytes: int | None = None
    #: NVML's form, "GPU-xxxxxxxx-...": joins the job to the monitor's device
    uuid: str | None = None

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any], where: str = "device") -> DeviceInfo:
        return cls(
            index=f.integer(obj, "index", where, 0, 1 << 16),
            name=f.opt_text(obj, "name", where, 256),
            total_memory_bytes=f.opt_integer(obj, "total_memory", where),
            uuid=f.opt_text(obj, "uuid", where, 128),
        )

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index}
        if self.name is not None:
            out["name"] = self.name
        if self.total_memory_bytes is not None:
            out["total_memory"] = self.total_memory_bytes
        if self.uuid is not None:
            out["uuid"] = self.uuid
        return out


@dataclass(frozen=True)
class GpuTiming:
    """How the hook times GPU phases with CUDA events."""

    enabled: bool = False
    active: bool = False
    events: int = 0
    pool_exhausted: int = 0
    pending_steps: int = 0

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any], where: str = "gpu_timing") -> GpuTiming:
        return cls(
            enabled=f.flag(obj, "enabled", where),
            active=f.flag(obj, "active", where),
            events=f.integer(obj, "events", where, default=0),
            pool_exhausted=f.integer(obj, "pool_exhausted", where, default=0),
            pending_steps=f.integer(obj, "pending_steps", where, default=0),
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "active": self.active,
            "events": self.events,
            "pool_exhausted": self.pool_exhausted,
            "pending_steps": self.pending_steps,
        }


@dataclass(frozen=True)
class CaptureInfo:
    """The capture controller's state, as the status reports it."""

    state: str | None = None  # None when idle, else one of messages.CAPTURE_ACTIVE
    id: str | None = None
    every_s: float | None = None  # periodic captures
    count: int = 0  # captures finished

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any], where: str = "capture") -> CaptureInfo:
        return cls(
            state=f.opt_text(obj, "state", where, 32),
            id=f.ident(obj, "id", where),
            every_s=f.opt_number(obj, "every_s", where),
            count=f.integer(obj, "count", where, default=0),
        )

    def to_wire(self) -> dict[str, Any]:
        return {"state": self.state, "id": self.id, "every_s": self.every_s, "count": self.count}


@dataclass(frozen=True)
class Status:
    """About once a second: the hook's counters and state."""

    t: float = 0.0  # Unix seconds when sent
    steps: int = 0  # step records finalised so far
    last_step: int | None = None  # index of the newest one
    recent_step_s: float | None = None  # mean wall time of the last 20 steps
    dropped: int = 0  # step records lost before the ring (training-side overflow)
    viewers: int = 0
    refused: int = 0  # connections refused (another uid, too many viewers)
    bad_frames: int = 0
    enabled: bool = True
    errors: tuple[str, ...] = ()
    phases_coarse: bool = False
    coarse_reasons: tuple[str, ...] = ()
    compiled_graphs: int | None = None
    torch_hooked: bool = False
    explicit_steps: bool = False
    root_modules: int = 0
    batch_size: int | None = None
    gpu_timing: GpuTiming | None = None
    memory_error: str | None = None
    capture: CaptureInfo = field(default_factory=CaptureInfo)

    @classmethod
    def from_wire(cls, obj: Any, where: str = "status") -> Status:
        obj = _typed(obj, where)
        timing = f.child(obj, "gpu_timing", where)
        capture = f.child(obj, "capture", where)
        return cls(
            t=f.number(obj, "t", where, hi=MAX_TIME_S, default=0.0),
            steps=f.integer(obj, "steps", where, default=0),
            last_step=f.opt_integer(obj, "last_step", where, lo=-1),
            recent_step_s=f.opt_number(obj, "recent_step_s", where),
            dropped=f.integer(obj, "dropped", where, default=0),
            viewers=f.integer(obj, "viewers", where, default=0),
            refused=f.integer(obj, "refused", where, default=0),
            bad_frames=f.integer(obj, "bad_frames", where, default=0),
            enabled=f.flag(obj, "enabled", where, default=True),
            errors=f.texts(obj, "errors", where, 100),
            phases_coarse=f.flag(obj, "phases_coarse", where),
            coarse_reasons=f.texts(obj, "coarse_reasons", where, 20),
            compiled_graphs=f.opt_integer(obj, "compiled_graphs", where),
            torch_hooked=f.flag(obj, "torch_hooked", where),
            explicit_steps=f.flag(obj, "explicit_steps", where),
            root_modules=f.integer(obj, "root_modules", where, default=0),
            batch_size=f.opt_integer(obj, "batch_size", where),
            gpu_timing=None
            if timing is None
            else GpuTiming.from_wire(timing, where + ".gpu_timing"),
            memory_error=f.opt_text(obj, "memory_error", where),
            capture=CaptureInfo()
            if capture is None
            else CaptureInfo.from_wire(capture, where + ".capture"),
        )

    def fields_wire(self) -> dict[str, Any]:
        """The status fields (also part of every hello)."""
        return {
            "t": self.t,
            "steps": self.steps,
            "last_step": self.last_step,
            "recent_step_s": self.recent_step_s,
            "dropped": self.dropped,
            "viewers": self.viewers,
            "refused": self.refused,
            "bad_frames": self.bad_frames,
            "enabled": self.enabled,
            "errors": list(self.errors),
            "phases_coarse": self.phases_coarse,
            "coarse_reasons": list(self.coarse_reasons),
            "compiled_graphs": self.compiled_graphs,
            "torch_hooked": self.torch_hooked,
            "explicit_steps": self.explicit_steps,
            "root_modules": self.root_modules,
            "batch_size": self.batch_size,
            "gpu_timing": None if self.gpu_timing is None else self.gpu_timing.to_wire(),
            "memory_error": self.memory_error,
            "capture": self.capture.to_wire(),
        }

    def to_wire(self) -> dict[str, Any]:
        out = _head(m.STATUS)
        out.update(self.fields_wire())
        return out


@dataclass(frozen=True)
class Hello:
    """The first frame on every connection: who the job is, plus its status."""

    pid: int
    argv: tuple[str, ...] = ()
    protocol: int = m.PROTOCOL_VERSION
    hook_version: str = ""
    ppid: int | None = None
    cwd: str | None = None
    hostname: str = ""
    python: str = ""
    executable: str | None = None
    torch: str | None = None
    cuda: str | None = None
    cuda_in_use: bool = False
    device: DeviceInfo | None = None
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    #: torchrun's TORCHELASTIC_RUN_ID, and MASTER_ADDR:MASTER_PORT: the ranks of
    #: one job share them
    run_id: str | None = None
    master: str | None = None
    started: float = 0.0  # Unix seconds the hook was installed
    lazy: bool = False
    history_capacity: int = 0
    status: Status = field(default_factory=Status)

    @classmethod
    def from_wire(cls, obj: Any, where: str = "hello") -> Hello:
        obj = _typed(obj, where)
        device = f.child(obj, "device", where)
        return cls(
            pid=f.integer(obj, "pid", where, 1, MAX_PID),
            argv=f.texts(obj, "argv", where, 1000, 100_000),
            protocol=f.integer(obj, "protocol", where, default=obj.get("v", 0)),
            hook_version=f.text(obj, "hook_version", where, 64, default=""),
            ppid=f.opt_integer(obj, "ppid", where, 0, MAX_PID),
            cwd=f.opt_text(obj, "cwd", where),
            hostname=f.text(obj, "hostname", where, 256, default=""),
            python=f.text(obj, "python", where, 64, default=""),
            executable=f.opt_text(obj, "executable", where),
            torch=f.opt_text(obj, "torch", where, 128),
            cuda=f.opt_text(obj, "cuda", where, 64),
            cuda_in_use=f.flag(obj, "cuda_in_use", where),
            device=None if device is None else DeviceInfo.from_wire(device, where + ".device"),
            rank=f.opt_integer(obj, "rank", where, 0, 1 << 24),
            local_rank=f.opt_integer(obj, "local_rank", where, 0, 1 << 24),
            world_size=f.opt_integer(obj, "world_size", where, 1, 1 << 24),
            run_id=f.opt_text(obj, "run_id", where, 256),
            master=f.opt_text(obj, "master", where, 512),
            started=f.number(obj, "started", where, hi=MAX_TIME_S, default=0.0),
            lazy=f.flag(obj, "lazy", where),
            history_capacity=f.integer(obj, "history_capacity", where, default=0),
            status=Status.from_wire(obj, where),
        )

    def to_wire(self) -> dict[str, Any]:
        out = _head(m.HELLO)
        out.update(self.status.fields_wire())
        out.update(
            {
                "protocol": self.protocol,
                "hook_version": self.hook_version,
                "pid": self.pid,
                "ppid": self.ppid,
                "argv": list(self.argv),
                "cwd": self.cwd,
                "hostname": self.hostname,
                "python": self.python,
                "executable": self.executable,
                "torch": self.torch,
                "cuda": self.cuda,
                "cuda_in_use": self.cuda_in_use,
                "device": None if self.device is None else self.device.to_wire(),
                "rank": self.rank,
                "local_rank": self.local_rank,
                "world_size": self.world_size,
                "run_id": self.run_id,
                "master": self.master,
                "started": self.started,
                "lazy": self.lazy,
                "history_capacity": self.history_capacity,
            }
        )
        return out

    @property
    def steps(self) -> int:
        return self.status.steps

    @property
    def recent_step_s(self) -> float | None:
        return self.status.recent_step_s


# -- steps --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepRecord:
    """One training step.  Times in seconds: ``phases`` is wall time per phase (they
    add up to ``wall``), ``gpu`` GPU time per phase on the steps whose phases were
    GPU-timed, ``gpu_total`` the step's GPU time; ``t`` is when it ended (Unix)."""

    index: int
    t: float
    wall: float
    phases: Mapping[str, float]
    gpu: Mapping[str, float] | None = None
    gpu_total: float | None = None
    samples: int | None = None
    samples_inferred: bool = False
    batches: int = 0
    flags: int = 0  # StepFlag bits

    @property
    def profiled(self) -> bool:
        return bool(self.flags & StepFlag.PROFILED)

    @staticmethod
    def wire(
        index: int,
        t: float,
        wall: float,
        phases: dict[str, float],
        gpu: dict[str, float] | None,
        gpu_total: float | None,
        samples: int | None,
        samples_inferred: bool,
        batches: int,
        flags: int,
    ) -> dict[str, Any]:
        """The wire object of a step, from its values (the hook's I/O thread builds
        one per step a viewer reads; optional keys are left out when empty)."""
        rec: dict[str, Any] = {"i": index, "t": t, "wall": wall, "phases": phases}
        if gpu is not None:
            rec["gpu"] = gpu
        if gpu_total is not None:
            rec["gpu_total"] = gpu_total
        if samples:
            rec["samples"] = samples
            if samples_inferred:
                rec["samples_inferred"] = True
        if batches:
            rec["batches"] = batches
        if flags:
            rec["flags"] = int(flags)
        return rec

    def to_wire(self) -> dict[str, Any]:
        return self.wire(
            self.index,
            self.t,
            self.wall,
            dict(self.phases),
            None if self.gpu is None else dict(self.gpu),
            self.gpu_total,
            self.samples,
            self.samples_inferred,
            self.batches,
            self.flags,
        )

    @classmethod
    def from_wire(cls, obj: Any, where: str = "step") -> StepRecord:
        # Viewers decode up to thousands of these a second: a record as the hook
        # writes it is checked inline; anything else takes the field-by-field path.
        if type(obj) is dict:
            fast = _fast_step(cls, obj)
            if fast is not None:
                return fast
        obj = _typed(obj, where)
        return cls(
            index=f.integer(obj, "i", where, 0),
            t=f.number(obj, "t", where, hi=MAX_TIME_S, default=0.0),
            wall=f.number(obj, "wall", where),
            phases=f.seconds_map(obj, "phases", where, default={}),
            gpu=f.seconds_map(obj, "gpu", where, default=None),
            gpu_total=f.opt_number(obj, "gpu_total", where),
            samples=f.opt_integer(obj, "samples", where),
            samples_inferred=f.flag(obj, "samples_inferred", where),
            batches=f.integer(obj, "batches", where, default=0),
            flags=f.integer(obj, "flags", where, 0, 0xFFFF, default=0),
        )


_OPTIONAL_STEP_KEYS = ("gpu", "gpu_total", "samples", "samples_inferred", "batches", "flags")


def _seconds_ok(phases: Any) -> bool:
    return (
        type(phases) is dict
        and len(phases) <= 1024
        and all(type(v) is float and 0.0 <= v <= 1e8 for v in phases.values())
        and all(len(k) <= 256 for k in phases)
    )


def _fast_step(cls: type[StepRecord], obj: dict[str, Any]) -> StepRecord | None:
    """The record if every field is of the plain form the hook sends, else None
    (the checked path then names what is wrong)."""
    i = obj.get("i")
    wall = obj.get("wall")
    t = obj.get("t", 0.0)
    phases = obj.get("phases", {})
    if not (
        type(i) is int
        and i >= 0
        and type(wall) is float
        and 0.0 <= wall <= 1e8
        and type(t) is float
        and 0.0 <= t <= MAX_TIME_S
        and _seconds_ok(phases)
    ):
        return None
    if not any(key in obj for key in _OPTIONAL_STEP_KEYS):
        return cls(i, t, wall, phases)
    gpu = obj.get("gpu")
    gpu_total = obj.get("gpu_total")
    samples = obj.get("samples")
    inferred = obj.get("samples_inferred", False)
    batches = obj.get("batches", 0)
    flags = obj.get("flags", 0)
    if not (
        (gpu is None or _seconds_ok(gpu))
        and (gpu_total is None or (type(gpu_total) is float and 0.0 <= gpu_total <= 1e8))
        and (samples is None or (type(samples) is int and 0 <= samples < 1 << 62))
        and type(inferred) is bool
        and type(batches) is int
        and 0 <= batches < 1 << 62
        and type(flags) is int
        and 0 <= flags <= 0xFFFF
    ):
        return None
    return cls(i, t, wall, phases, gpu, gpu_total, samples, inferred, batches, flags)


@dataclass(frozen=True)
class StepBatch:
    steps: tuple[StepRecord, ...]
    missed: int = 0  # step records this viewer will never get (before steps[0])
    backlog: bool = False  # part of the history sent after subscribe

    @classmethod
    def from_wire(cls, obj: Any, where: str = "steps") -> StepBatch:
        obj = _typed(obj, where)
        raw = f.items(obj, "steps", where, 100_000)
        return cls(
            steps=tuple(StepRecord.from_wire(r, f"{where}.steps[{i}]") for i, r in enumerate(raw)),
            missed=f.integer(obj, "missed", where, default=0),
            backlog=f.flag(obj, "backlog", where),
        )

    def to_wire(self) -> dict[str, Any]:
        out = _head(m.STEPS)
        out.update(
            steps=[s.to_wire() for s in self.steps], missed=self.missed, backlog=self.backlog
        )
        return out


@dataclass(frozen=True)
class Synced:
    """The backlog asked for in subscribe has been delivered."""

    steps: int = 0

    @classmethod
    def from_wire(cls, obj: Any, where: str = "synced") -> Synced:
        return cls(steps=f.integer(_typed(obj, where), "steps", where, default=0))

    def to_wire(self) -> dict[str, Any]:
        out = _head(m.SYNCED)
        out["steps"] = self.steps
        return out


# -- memory --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MemorySample:
    """The caching allocator's counters for one device (bytes; counts)."""

    t: float
    device: int
    allocated: int
    reserved: int
    active: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    alloc_retries: int = 0
    ooms: int = 0

    @classmethod
    def from_wire(cls, obj: Any, where: str = "sample") -> MemorySample:
        obj = _typed(obj, where)
        return cls(
            t=f.number(obj, "t", where, hi=MAX_TIME_S, default=0.0),
            device=f.integer(obj, "device", where, 0, 1 << 16, default=0),
            allocated=f.integer(obj, "allocated", where),
            reserved=f.integer(obj, "reserved", where),
            active=f.integer(obj, "active", where, default=0),
            peak_allocated=f.integer(obj, "peak_allocated", where, default=0),
            peak_reserved=f.integer(obj, "peak_reserved", where, default=0),
            alloc_retries=f.integer(obj, "alloc_retries", where, default=0),
            ooms=f.integer(obj, "ooms", where, default=0),
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "t": self.t,
            "device": self.device,
            "allocated": self.allocated,
            "reserved": self.reserved,
            "active": self.active,
            "peak_allocated": self.peak_allocated,
            "peak_reserved": self.peak_reserved,
            "alloc_retries": self.alloc_retries,
            "ooms": self.ooms,
        }


@dataclass(frozen=True)
class MemoryBatch:
    samples: tuple[MemorySample, ...]

    @classmethod
    def from_wire(cls, obj: Any, where: str = "memory") -> MemoryBatch:
        raw = f.items(_typed(obj, where), "samples", where, 100_000)
        return cls(
            tuple(MemorySample.from_wire(s, f"{where}.samples[{i}]") for i, s in enumerate(raw))
        )

    def to_wire(self) -> dict[str, Any]:
        out = _head(m.MEMORY)
        out["samples"] = [s.to_wire() for s in self.samples]
        return out


# -- small messages -----------------------------------------------------------------------------
@dataclass(frozen=True)
class HookError:
    """A request the hook could not serve (the connection stays open)."""

    error: str

    @classmethod
    def from_wire(cls, obj: Any, where: str = "error") -> HookError:
        obj = _typed(obj, where)
        # "message": what hooks of the first version could have sent instead
        return cls(error=f.text(obj, "error", where, default=obj.get("message") or "error"))

    def to_wire(self) -> dict[str, Any]:
        out = _head(m.ERROR)
        out["error"] = self.error
        return out


@dataclass(frozen=True)
class Pong:
    t: float = 0.0

    @classmethod
    def from_wire(cls, obj: Any, where: str = "pong") -> Pong:
        return cls(t=f.number(_typed(obj, where), "t", where, hi=MAX_TIME_S, default=0.0))

    def to_wire(self) -> dict[str, Any]:
        out = _head(m.PONG)
        out["t"] = self.t
        return out


@dataclass(frozen=True)
class Bye:
    """The job is exiting; the socket goes away next."""

    pid: int | None = None
    steps: int = 0

    @classmethod
    def from_wire(cls, obj: Any, where: str = "bye") -> Bye:
        obj = _typed(obj, where)
        return cls(
            pid=f.opt_integer(obj, "pid", where, 1, MAX_PID),
            steps=f.integer(obj, "steps", where, default=0),
        )

    def to_wire(self) -> dict[str, Any]:
        out = _head(m.BYE)
        out.update(pid=self.pid, steps=self.steps)
        return out


# -- viewer requests ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Subscribe:
    history: int = 0  # step records of history to send first
    memory: bool = True

    @classmethod
    def from_wire(cls, obj: Any, where: str = "subscribe") -> Subscribe:
        obj = _typed(obj, where)
        return cls(
            history=f.integer(obj, "history", where, 0, 1 << 30, default=0),
            memory=f.flag(obj, "memory", where, default=True),
        )

    def to_wire(self) -> dict[str, Any]:
        out = _head(m.SUBSCRIBE)
        out.update(history=self.history, memory=self.memory)
        return out


@dataclass(frozen=True)
class CaptureRequest:
    id: str | None = None
    steps: int = 5
    warmup: int = 1
    shapes: bool = False
    stacks: bool = False
    memory: bool = False

    @classmethod
    def from_wire(cls, obj: Any, where: str = "capture") -> CaptureRequest:
        obj = _typed(obj, where)
        return cls(
            id=f.ident(obj, "id", where),
            steps=f.integer(obj, "steps", where, 1, m.CAPTURE_MAX_STEPS, default=5),
            warmup=f.integer(obj, "warmup", where, 0, m.CAPTURE_MAX_WARMUP, default=1),
            shapes=f.flag(obj, "shapes", where),
            stacks=f.flag(obj, "stacks", where),
            memory=f.flag(obj, "memory", where),
        )

    def to_wire(self) -> dict[str, Any]:
        out = _head(m.CAPTURE)
        out.update(
            id=self.id,
            steps=self.steps,
            warmup=self.warmup,
            shapes=self.shapes,
            stacks=self.stacks,
            memory=self.memory,
        )
        return out


@dataclass(frozen=True)
class CaptureCancel:
    @classmethod
    def from_wire(cls, obj: Any, where: str = "capture_cancel") -> CaptureCancel:
        _typed(obj, where)
        return cls()

    def to_wire(self) -> dict[str, Any]:
        return _head(m.CAPTURE_CANCEL)


@dataclass(frozen=True)
class Ping:
    @classmethod
    def from_wire(cls, obj: Any, where: str = "ping") -> Ping:
        _typed(obj, where)
        return cls()

    def to_wire(self) -> dict[str, Any]:
        return _head(m.PING)
