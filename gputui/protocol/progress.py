"""The progress of a job-side operation a viewer asked for (a capture, a memory
snapshot): one shape for both, each message type naming its own states."""

from __future__ import annotations

from typing import ClassVar

from gputui.protocol import spec
from gputui.protocol.value import value_class


@value_class
class Progress(spec.Wire):
    """A state of the operation's :attr:`ACTIVE` states, or one that ended it
    without a result (refused, busy, cancelled, failed, ...).  A subclass names
    its message type (``spec.message``) and may add optional fields."""

    #: the states in which it is still running
    ACTIVE: ClassVar[frozenset[str]] = frozenset()

    state: str = spec.text(limit=32)
    id: str | None = spec.ident()
    reason: str | None = spec.text(None, omit_none=True)  # why it was refused, failed, ...
    step: int | None = spec.integer(None, omit_none=True)  # the step it started at
    steps: int | None = spec.integer(None, omit_none=True)  # steps it records

    @property
    def active(self) -> bool:
        return self.state in self.ACTIVE

    @property
    def ended(self) -> bool:
        """Over without a result."""
        return not self.active
