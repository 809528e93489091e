"""Typed hello and status messages (see :mod:`gputui.protocol.schema`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gputui.protocol import fields as f
from gputui.protocol import messages as m
from gputui.protocol import spec
from gputui.protocol.fields import MAX_PID, MAX_TIME_S
from gputui.protocol.profile import SamplerInfo
from gputui.protocol.value import value_class


# -- hello and status ----------------------------------------------------------------------------
@spec.value("device")
@value_class
class DeviceInfo(spec.Wire):
    """The CUDA device the job's training thread uses."""

    index: int = spec.integer(hi=1 << 16)
    name: str | None = spec.text(None, 256, omit_none=True)
    total_memory_bytes: int | None = spec.integer(None, key="total_memory", omit_none=True)
    #: NVML's form, "GPU-xxxxxxxx-...": joins the job to the monitor's device
    uuid: str | None = spec.text(None, 128, omit_none=True)


@spec.value("gpu_timing")
@value_class
class GpuTiming(spec.Wire):
    """How the hook times GPU phases with CUDA events."""

    enabled: bool = False
    active: bool = False
    events: int = 0
    pool_exhausted: int = 0
    pending_steps: int = 0


@spec.value("loader")
@value_class
class LoaderInfo(spec.Wire):
    """The DataLoader the training loop iterates (the newest one seen): what
    the data-loading rules name in their fix."""

    num_workers: int = spec.integer(0, hi=4096)
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = spec.integer(None, hi=1 << 16)


@spec.value("capture")
@value_class
class CaptureInfo(spec.Wire):
    """The capture controller's state, as the status reports it."""

    # None when idle, else one of messages.CAPTURE_ACTIVE
    state: str | None = spec.text(None, 32)
    id: str | None = spec.ident()
    every_s: float | None = None  # periodic captures
    count: int = 0  # captures finished


@spec.value("comm")
@value_class
class CommInfo(spec.Wire):
    """How the hook measures communication time (docs/hook.md, "Communication")."""

    #: explicit torch.distributed collectives (and Work.wait) are timed as "comm"
    collectives: bool = False
    #: DDP models whose gradient all-reduce wait at the end of backward is timed
    ddp_models: int = spec.integer(0, hi=1 << 20)
    #: what is not timed, and why (a DDP model with its own hook at construction, ...)
    notes: tuple[str, ...] = spec.texts(20)


#: the modules whose presence names the framework that runs the training loop
#: (``Status.frameworks``): the Hugging Face Trainer, Lightning
FRAMEWORK_MODULES = (
    ("transformers.trainer", "transformers"),
    ("lightning.pytorch.trainer.trainer", "lightning"),
    ("pytorch_lightning.trainer.trainer", "lightning"),
)

#: top-level forward calls with gradients off, no optimizer and no step(), after
#: which each such call ends a step (``Status.forward_steps``)
INFERENCE_CALLS = 20


@spec.message(m.STATUS)
@value_class
class Status(spec.Wire):
    """About once a second: the hook's counters and state."""

    t: float = spec.number(0.0, hi=MAX_TIME_S)  # Unix seconds when sent
    steps: int = 0  # step records finalised so far
    last_step: int | None = spec.integer(None, lo=-1)  # index of the newest one
    recent_step_s: float | None = None  # mean wall time of the last 20 steps
    dropped: int = 0  # step records lost before the ring (training-side overflow)
    viewers: int = 0
    refused: int = 0  # connections refused (another uid, too many viewers)
    bad_frames: int = 0
    stuck_viewers: int = 0  # viewers dropped for leaving too much unread
    enabled: bool = True
    errors: tuple[str, ...] = spec.texts(100)
    phases_coarse: bool = False
    coarse_reasons: tuple[str, ...] = spec.texts(20)
    compiled_graphs: int | None = None
    torch_hooked: bool = False
    explicit_steps: bool = False
    root_modules: int = 0
    #: no optimizer and no step(): each top-level forward call ends a step (an
    #: inference loop, from its INFERENCE_CALLS-th call); absent from an older
    #: hook's status
    forward_steps: bool = False
    batch_size: int | None = None
    gpu_timing: GpuTiming | None = spec.nested(GpuTiming)
    memory_error: str | None = None
    capture: CaptureInfo = spec.nested(CaptureInfo, factory=CaptureInfo)
    #: the phase the training thread is in now (innermost; "other" between
    #: phases), how long since its last phase edge, and since the step in
    #: progress began: a rank stuck in a collective or a data loader shows here
    phase_now: str | None = spec.text(None, 256)
    phase_now_s: float | None = None
    step_now_s: float | None = None
    comm: CommInfo | None = spec.nested(CommInfo)
    #: the DataLoader being iterated; None before the first batch, or without one
    loader: LoaderInfo | None = spec.nested(LoaderInfo)
    #: the Python stack sampler; None (absent on the wire) from a hook that predates it
    sampler: SamplerInfo | None = spec.nested(SamplerInfo, omit_none=True)
    #: the training frameworks the job imported (``FRAMEWORK_MODULES``), whose
    #: arguments the advice names; empty (absent on the wire) for a loop of the
    #: job's own, or from a hook that predates it
    frameworks: tuple[str, ...] = spec.texts(16, 64, omit_empty=True)


def _protocol(obj: Mapping[str, Any], key: str, where: str) -> int:
    # a hello of the first version said it only in "v"
    return f.integer(obj, key, where, default=obj.get("v", 0))  # type: ignore[no-any-return]


@spec.message(m.HELLO)
@dataclass(frozen=True, kw_only=True)
class Hello(spec.Wire):
    """The first frame on every connection: who the job is, plus its status
    (whose keys stand in the hello's own object, first)."""

    status: Status = spec.inline(Status, factory=Status)
    protocol: int = spec.field(_protocol, default=m.PROTOCOL_VERSION)
    hook_version: str = spec.text("", 64)
    pid: int = spec.integer(lo=1, hi=MAX_PID)
    ppid: int | None = spec.integer(None, hi=MAX_PID)
    argv: tuple[str, ...] = spec.texts(1000, 100_000)
    cwd: str | None = None
    hostname: str = spec.text("", 256)
    python: str = spec.text("", 64)
    executable: str | None = None
    torch: str | None = spec.text(None, 128)
    cuda: str | None = spec.text(None, 64)
    cuda_in_use: bool = False
    device: DeviceInfo | None = spec.nested(DeviceInfo)
    rank: int | None = spec.integer(None, hi=1 << 24)
    local_rank: int | None = spec.integer(None, hi=1 << 24)
    world_size: int | None = spec.integer(None, lo=1, hi=1 << 24)
    #: ranks of the job on this node (LOCAL_WORLD_SIZE): the rest are on others
    local_world_size: int | None = spec.integer(None, lo=1, hi=1 << 24)
    #: torchrun's TORCHELASTIC_RUN_ID, and MASTER_ADDR:MASTER_PORT: the ranks of
    #: one job share them
    run_id: str | None = spec.text(None, 256)
    master: str | None = spec.text(None, 512)
    started: float = spec.number(0.0, hi=MAX_TIME_S)  # Unix seconds the hook was installed
    lazy: bool = False
    history_capacity: int = 0
    #: the CPU cores the job may run on: its CPU affinity, capped by its cgroup's
    #: CPU quota (a container's limit); what the advice counts DataLoader workers
    #: against.  None (absent) from an older hook, or where neither can be read
    cpus: int | None = spec.integer(None, lo=1, hi=1 << 20, omit_none=True)

    @property
    def steps(self) -> int:
        return self.status.steps

    @property
    def recent_step_s(self) -> float | None:
        return self.status.recent_step_s
