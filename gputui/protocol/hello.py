"""Typed hello and status messages (see :mod:`gputui.protocol.schema`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gputui.protocol import fields as f
from gputui.protocol import messages as m
from gputui.protocol.fields import MAX_PID, MAX_TIME_S, header, typed
from gputui.protocol.profile import SamplerInfo


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
class LoaderInfo:
    """The DataLoader the training loop iterates (the newest one seen): what
    the data-loading rules name in their fix."""

    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = None

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any], where: str = "loader") -> LoaderInfo:
        return cls(
            num_workers=f.integer(obj, "num_workers", where, 0, 4096, default=0),
            pin_memory=f.flag(obj, "pin_memory", where),
            persistent_workers=f.flag(obj, "persistent_workers", where),
            prefetch_factor=f.opt_integer(obj, "prefetch_factor", where, 0, 1 << 16),
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "num_workers": self.num_workers,
            "pin_memory": self.pin_memory,
            "persistent_workers": self.persistent_workers,
            "prefetch_factor": self.prefetch_factor,
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
class CommInfo:
    """How the hook measures communication time (docs/hook.md, "Communication")."""

    #: explicit torch.distributed collectives (and Work.wait) are timed as "comm"
    collectives: bool = False
    #: DDP models whose gradient all-reduce wait at the end of backward is timed
    ddp_models: int = 0
    #: what is not timed, and why (a DDP model with its own hook at construction, ...)
    notes: tuple[str, ...] = ()

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any], where: str = "comm") -> CommInfo:
        return cls(
            collectives=f.flag(obj, "collectives", where),
            ddp_models=f.integer(obj, "ddp_models", where, 0, 1 << 20, default=0),
            notes=f.texts(obj, "notes", where, 20),
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "collectives": self.collectives,
            "ddp_models": self.ddp_models,
            "notes": list(self.notes),
        }


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
    stuck_viewers: int = 0  # viewers dropped for leaving too much unread
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
    #: the phase the training thread is in now (innermost; "other" between
    #: phases), how long since its last phase edge, and since the step in
    #: progress began: a rank stuck in a collective or a data loader shows here
    phase_now: str | None = None
    phase_now_s: float | None = None
    step_now_s: float | None = None
    comm: CommInfo | None = None
    #: the DataLoader being iterated; None before the first batch, or without one
    loader: LoaderInfo | None = None
    #: the Python stack sampler; None from a hook that predates it
    sampler: SamplerInfo | None = None

    @classmethod
    def from_wire(cls, obj: Any, where: str = "status") -> Status:
        obj = typed(obj, where)
        timing = f.child(obj, "gpu_timing", where)
        capture = f.child(obj, "capture", where)
        comm = f.child(obj, "comm", where)
        loader = f.child(obj, "loader", where)
        sampler = f.child(obj, "sampler", where)
        return cls(
            t=f.number(obj, "t", where, hi=MAX_TIME_S, default=0.0),
            steps=f.integer(obj, "steps", where, default=0),
            last_step=f.opt_integer(obj, "last_step", where, lo=-1),
            recent_step_s=f.opt_number(obj, "recent_step_s", where),
            dropped=f.integer(obj, "dropped", where, default=0),
            viewers=f.integer(obj, "viewers", where, default=0),
            refused=f.integer(obj, "refused", where, default=0),
            bad_frames=f.integer(obj, "bad_frames", where, default=0),
            stuck_viewers=f.integer(obj, "stuck_viewers", where, default=0),
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
            phase_now=f.opt_text(obj, "phase_now", where, 256),
            phase_now_s=f.opt_number(obj, "phase_now_s", where),
            step_now_s=f.opt_number(obj, "step_now_s", where),
            comm=None if comm is None else CommInfo.from_wire(comm, where + ".comm"),
            loader=None if loader is None else LoaderInfo.from_wire(loader, where + ".loader"),
            sampler=None if sampler is None else SamplerInfo.from_wire(sampler, where + ".sampler"),
        )

    def fields_wire(self) -> dict[str, Any]:
        """The status fields (also part of every hello)."""
        out = {
            "t": self.t,
            "steps": self.steps,
            "last_step": self.last_step,
            "recent_step_s": self.recent_step_s,
            "dropped": self.dropped,
            "viewers": self.viewers,
            "refused": self.refused,
            "bad_frames": self.bad_frames,
            "stuck_viewers": self.stuck_viewers,
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
            "phase_now": self.phase_now,
            "phase_now_s": self.phase_now_s,
            "step_now_s": self.step_now_s,
            "comm": None if self.comm is None else self.comm.to_wire(),
            "loader": None if self.loader is None else self.loader.to_wire(),
        }
        if self.sampler is not None:  # absent, as from a hook older than the sampler
            out["sampler"] = self.sampler.to_wire()
        return out

    def to_wire(self) -> dict[str, Any]:
        out = header(m.STATUS)
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
    #: ranks of the job on this node (LOCAL_WORLD_SIZE): the rest are on others
    local_world_size: int | None = None
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
        obj = typed(obj, where)
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
            local_world_size=f.opt_integer(obj, "local_world_size", where, 1, 1 << 24),
            run_id=f.opt_text(obj, "run_id", where, 256),
            master=f.opt_text(obj, "master", where, 512),
            started=f.number(obj, "started", where, hi=MAX_TIME_S, default=0.0),
            lazy=f.flag(obj, "lazy", where),
            history_capacity=f.integer(obj, "history_capacity", where, default=0),
            status=Status.from_wire(obj, where),
        )

    def to_wire(self) -> dict[str, Any]:
        out = header(m.HELLO)
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
                "local_world_size": self.local_world_size,
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
