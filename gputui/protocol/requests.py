"""Typed viewer requests and the hook's small replies (see
:mod:`gputui.protocol.schema`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gputui.protocol import fields as f
from gputui.protocol import messages as m
from gputui.protocol import spec
from gputui.protocol.fields import MAX_PID, MAX_TIME_S
from gputui.protocol.value import value_class


# -- small messages -----------------------------------------------------------------------------
def _error(obj: Mapping[str, Any], key: str, where: str) -> str:
    # "message": what hooks of the first version could have sent instead
    return f.text(obj, key, where, default=obj.get("message") or "error")  # type: ignore[no-any-return]


@spec.message(m.ERROR)
@value_class
class HookError(spec.Wire):
    """A request the hook could not serve (the connection stays open)."""

    error: str = spec.field(_error)


@spec.message(m.PONG)
@value_class
class Pong(spec.Wire):
    t: float = spec.number(0.0, hi=MAX_TIME_S)


@spec.message(m.BYE)
@value_class
class Bye(spec.Wire):
    """The job is exiting; the socket goes away next."""

    pid: int | None = spec.integer(None, 1, MAX_PID)
    steps: int = 0


# -- viewer requests ----------------------------------------------------------------------------
@spec.message(m.SUBSCRIBE)
@value_class
class Subscribe(spec.Wire):
    history: int = spec.integer(0, hi=1 << 30)  # step records of history to send first
    memory: bool = True


@spec.message(m.CAPTURE)
@value_class
class CaptureRequest(spec.Wire):
    id: str | None = spec.ident()
    steps: int = spec.integer(5, 1, m.CAPTURE_MAX_STEPS)
    warmup: int = spec.integer(1, 0, m.CAPTURE_MAX_WARMUP)
    shapes: bool = False
    stacks: bool = False
    memory: bool = False
    #: torch's FLOP counts and op rows for the roofline (implies shapes)
    flops: bool = False
    #: record from this step index on (warm-up before it), so that every rank of a
    #: job profiles the same steps; None: from the next step boundary
    start_step: int | None = spec.integer(None, 0, 1 << 62, omit_none=True)
    #: asked by a viewer on its own (the automatic capture), not by its user;
    #: the result says so (a hook that predates it ignores the key; sent only
    #: when true)
    auto: bool = spec.flag(omit_empty=True)


@spec.message(m.CAPTURE_CANCEL)
@value_class
class CaptureCancel(spec.Wire):
    pass


@spec.message(m.PING)
@value_class
class Ping(spec.Wire):
    pass
