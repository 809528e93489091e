"""What the monitor's screens need from the app, as a small protocol.

Screens are written against :class:`MonitorHost`, not the app class: the app
implements it, and a test can hand a screen any object that does.  ``Current``
is the newest data every screen draws from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from gputui.analysis.finding import Finding
from gputui.host.in_view import InView
from gputui.snapshot.history import History
from gputui.snapshot.model import ProcessSnapshot, Snapshot
from gputui.sources.base import SnapshotSource
from gputui.sources.poller import Poller

if TYPE_CHECKING:  # the live monitor never imports the replay module
    from gputui.ceilings.measured import Ceilings
    from gputui.recording.replay import ReplayProgress


@dataclass
class Current:
    """The newest data, shared by every screen."""

    snapshot: Snapshot | None = None
    #: the time the data describes: a recording's own time, else the sample time
    data_time_s: float = 0.0
    findings: list[Finding] = field(default_factory=list)
    #: the poller's last failure, until a snapshot comes again
    poll_error: str | None = None
    #: where a replay is (position, total, loops); None for live data
    replay: ReplayProgress | None = None
    #: GPU UUID -> the ceilings `gputui bench` measured on it (live data only)
    ceilings: Mapping[str, Ceilings] = field(default_factory=dict)


class MonitorHost(Protocol):
    """The monitor app, as its screens see it."""

    current: Current
    history: History
    poller: Poller
    source: SnapshotSource
    #: the pids on screen, read by a live collector
    in_view: InView
    banner: str | None
    readonly: bool
    ascii_only: bool

    def request_signal(self, proc: ProcessSnapshot | None) -> None: ...

    def request_attach(self, proc: ProcessSnapshot | None) -> None: ...

    def recording_banner(self) -> str | None: ...
