"""What the monitor's screens need from the app, as a small protocol.

Screens are written against :class:`MonitorHost`, not the app class: the app
implements it, and a test can hand a screen any object that does.  The data
every screen draws from is the session's (:mod:`gputui.session.monitor`): its
``current`` values, its history, its poller's interval and pause.
"""

from __future__ import annotations

from typing import Protocol

from gputui.session.monitor import MonitorSession
from gputui.snapshot.model import ProcessSnapshot


class MonitorHost(Protocol):
    """The monitor app, as its screens see it."""

    session: MonitorSession
    banner: str | None
    readonly: bool
    ascii_only: bool

    def request_signal(self, proc: ProcessSnapshot | None) -> None: ...

    def request_attach(self, proc: ProcessSnapshot | None) -> None: ...

    def recording_banner(self) -> str | None: ...
