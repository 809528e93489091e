"""Typed step and memory messages (see :mod:`gputui.protocol.schema`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gputui.protocol import messages as m
from gputui.protocol import spec
from gputui.protocol.fields import MAX_TIME_S
from gputui.protocol.value import value_class

StepFlag = m.StepFlag


# -- steps --------------------------------------------------------------------------------------
@spec.value("step")
@dataclass(frozen=True)
class StepRecord(spec.Wire):
    """One training step.  Times in seconds: ``phases`` is wall time per phase (they
    add up to ``wall``), ``gpu`` GPU time per phase on the steps whose phases were
    GPU-timed, ``gpu_total`` the step's GPU time; ``t`` is when it ended (Unix)."""

    index: int = spec.integer(key="i")
    t: float = spec.number(hi=MAX_TIME_S, missing=0.0)
    wall: float = spec.number()
    phases: Mapping[str, float] = spec.seconds(required=True)
    gpu: Mapping[str, float] | None = spec.seconds(default=None)
    gpu_total: float | None = None
    samples: int | None = None
    samples_inferred: bool = False
    batches: int = 0
    flags: int = spec.integer(0, hi=0xFFFF)  # StepFlag bits

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
        return spec.decode(cls, obj, where)


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


@spec.message(m.STEPS)
@value_class
class StepBatch(spec.Wire):
    steps: tuple[StepRecord, ...] = spec.rows(StepRecord, 100_000, required=True)
    missed: int = 0  # step records this viewer will never get (before steps[0])
    backlog: bool = False  # part of the history sent after subscribe


@spec.message(m.SYNCED)
@value_class
class Synced(spec.Wire):
    """The backlog asked for in subscribe has been delivered."""

    steps: int = 0


# -- memory --------------------------------------------------------------------------------------
@spec.value("sample")
@dataclass(frozen=True)
class MemorySample(spec.Wire):
    """The caching allocator's counters for one device (bytes; counts)."""

    t: float = spec.number(hi=MAX_TIME_S, missing=0.0)
    device: int = spec.integer(hi=1 << 16, missing=0)
    allocated: int = spec.integer()
    reserved: int = spec.integer()
    active: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    alloc_retries: int = 0
    ooms: int = 0
    #: the index of the newest finished step when the sample was taken (None:
    #: before the first step, or a hook that does not say)
    step: int | None = spec.integer(None, lo=-1, omit_none=True)


@spec.message(m.MEMORY)
@value_class
class MemoryBatch(spec.Wire):
    samples: tuple[MemorySample, ...] = spec.rows(MemorySample, 100_000, required=True)
