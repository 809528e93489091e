"""Typed viewer requests and the hook's small replies (see
:mod:`gputui.protocol.schema`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gputui.protocol import fields as f
from gputui.protocol import messages as m
from gputui.protocol.fields import MAX_PID, MAX_TIME_S, header, typed


# -- small messages -----------------------------------------------------------------------------
@dataclass(frozen=True)
class HookError:
    """A request the hook could not serve (the connection stays open)."""

    error: str

    @classmethod
    def from_wire(cls, obj: Any, where: str = "error") -> HookError:
        obj = typed(obj, where)
        # "message": what hooks of the first version could have sent instead
        return cls(error=f.text(obj, "error", where, default=obj.get("message") or "error"))

    def to_wire(self) -> dict[str, Any]:
        out = header(m.ERROR)
        out["error"] = self.error
        return out


@dataclass(frozen=True)
class Pong:
    t: float = 0.0

    @classmethod
    def from_wire(cls, obj: Any, where: str = "pong") -> Pong:
        return cls(t=f.number(typed(obj, where), "t", where, hi=MAX_TIME_S, default=0.0))

    def to_wire(self) -> dict[str, Any]:
        out = header(m.PONG)
        out["t"] = self.t
        return out


@dataclass(frozen=True)
class Bye:
    """The job is exiting; the socket goes away next."""

    pid: int | None = None
    steps: int = 0

    @classmethod
    def from_wire(cls, obj: Any, where: str = "bye") -> Bye:
        obj = typed(obj, where)
        return cls(
            pid=f.opt_integer(obj, "pid", where, 1, MAX_PID),
            steps=f.integer(obj, "steps", where, default=0),
        )

    def to_wire(self) -> dict[str, Any]:
        out = header(m.BYE)
        out.update(pid=self.pid, steps=self.steps)
        return out


# -- viewer requests ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Subscribe:
    history: int = 0  # step records of history to send first
    memory: bool = True

    @classmethod
    def from_wire(cls, obj: Any, where: str = "subscribe") -> Subscribe:
        obj = typed(obj, where)
        return cls(
            history=f.integer(obj, "history", where, 0, 1 << 30, default=0),
            memory=f.flag(obj, "memory", where, default=True),
        )

    def to_wire(self) -> dict[str, Any]:
        out = header(m.SUBSCRIBE)
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
    #: torch's FLOP counts and op rows for the roofline (implies shapes)
    flops: bool = False
    #: record from this step index on (warm-up before it), so that every rank of a
    #: job profiles the same steps; None: from the next step boundary
    start_step: int | None = None
    #: asked by a viewer on its own (the automatic capture), not by its user;
    #: the result says so (a hook that predates it ignores the key)
    auto: bool = False

    @classmethod
    def from_wire(cls, obj: Any, where: str = "capture") -> CaptureRequest:
        obj = typed(obj, where)
        return cls(
            id=f.ident(obj, "id", where),
            steps=f.integer(obj, "steps", where, 1, m.CAPTURE_MAX_STEPS, default=5),
            warmup=f.integer(obj, "warmup", where, 0, m.CAPTURE_MAX_WARMUP, default=1),
            shapes=f.flag(obj, "shapes", where),
            stacks=f.flag(obj, "stacks", where),
            memory=f.flag(obj, "memory", where),
            flops=f.flag(obj, "flops", where),
            start_step=f.opt_integer(obj, "start_step", where, 0, 1 << 62),
            auto=f.flag(obj, "auto", where),
        )

    def to_wire(self) -> dict[str, Any]:
        out = header(m.CAPTURE)
        out.update(
            id=self.id,
            steps=self.steps,
            warmup=self.warmup,
            shapes=self.shapes,
            stacks=self.stacks,
            memory=self.memory,
            flops=self.flops,
        )
        if self.start_step is not None:
            out["start_step"] = self.start_step
        if self.auto:
            out["auto"] = True
        return out


@dataclass(frozen=True)
class CaptureCancel:
    @classmethod
    def from_wire(cls, obj: Any, where: str = "capture_cancel") -> CaptureCancel:
        typed(obj, where)
        return cls()

    def to_wire(self) -> dict[str, Any]:
        return header(m.CAPTURE_CANCEL)


@dataclass(frozen=True)
class Ping:
    @classmethod
    def from_wire(cls, obj: Any, where: str = "ping") -> Ping:
        typed(obj, where)
        return cls()

    def to_wire(self) -> dict[str, Any]:
        return header(m.PING)
