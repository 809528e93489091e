"""Typed step and memory messages (see :mod:`gputui.protocol.schema`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gputui.protocol import fields as f
from gputui.protocol import messages as m
from gputui.protocol.fields import MAX_TIME_S, header, typed

StepFlag = m.StepFlag


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
        obj = typed(obj, where)
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
        obj = typed(obj, where)
        raw = f.items(obj, "steps", where, 100_000)
        return cls(
            steps=tuple(StepRecord.from_wire(r, f"{where}.steps[{i}]") for i, r in enumerate(raw)),
            missed=f.integer(obj, "missed", where, default=0),
            backlog=f.flag(obj, "backlog", where),
        )

    def to_wire(self) -> dict[str, Any]:
        out = header(m.STEPS)
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
        return cls(steps=f.integer(typed(obj, where), "steps", where, default=0))

    def to_wire(self) -> dict[str, Any]:
        out = header(m.SYNCED)
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
    #: the index of the newest finished step when the sample was taken (None:
    #: before the first step, or a hook that does not say)
    step: int | None = None

    @classmethod
    def from_wire(cls, obj: Any, where: str = "sample") -> MemorySample:
        obj = typed(obj, where)
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
            step=f.opt_integer(obj, "step", where, lo=-1),
        )

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
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
        if self.step is not None:
            out["step"] = self.step
        return out


@dataclass(frozen=True)
class MemoryBatch:
    samples: tuple[MemorySample, ...]

    @classmethod
    def from_wire(cls, obj: Any, where: str = "memory") -> MemoryBatch:
        raw = f.items(typed(obj, where), "samples", where, 100_000)
        return cls(
            tuple(MemorySample.from_wire(s, f"{where}.samples[{i}]") for i, s in enumerate(raw))
        )

    def to_wire(self) -> dict[str, Any]:
        out = header(m.MEMORY)
        out["samples"] = [s.to_wire() for s in self.samples]
        return out
