"""The progress of a job-side operation a viewer asked for (a capture, a memory
snapshot): one shape for both, each message type naming its own states."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from gputui.protocol import fields as f
from gputui.protocol.fields import header, typed


@dataclass(frozen=True)
class Progress:
    """A state of the operation's :attr:`ACTIVE` states, or one that ended it
    without a result (refused, busy, cancelled, failed, ...)."""

    #: the message type on the wire, and the states in which it is still running
    TYPE: ClassVar[str] = ""
    ACTIVE: ClassVar[frozenset[str]] = frozenset()
    #: optional fields beyond the common ones (sent only when set)
    EXTRA: ClassVar[tuple[str, ...]] = ()

    state: str
    id: str | None = None
    reason: str | None = None  # why it was refused, failed, ...
    step: int | None = None  # the step it started at
    steps: int | None = None  # steps it records

    @property
    def active(self) -> bool:
        return self.state in self.ACTIVE

    @property
    def ended(self) -> bool:
        """Over without a result."""
        return not self.active

    @classmethod
    def _fields(cls, obj: Any, where: str) -> dict[str, Any]:
        obj = typed(obj, where)
        out: dict[str, Any] = {
            "state": f.text(obj, "state", where, 32),
            "id": f.ident(obj, "id", where),
            "reason": f.opt_text(obj, "reason", where),
            "step": f.opt_integer(obj, "step", where),
            "steps": f.opt_integer(obj, "steps", where),
        }
        for key in cls.EXTRA:
            out[key] = f.opt_integer(obj, key, where)
        return out

    def to_wire(self) -> dict[str, Any]:
        out = header(self.TYPE)
        out.update(state=self.state, id=self.id)
        for key in ("reason", "step", "steps", *self.EXTRA):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out
