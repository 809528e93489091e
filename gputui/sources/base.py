"""What a snapshot source is: one call of ``sample()``, one whole :class:`Snapshot`.

:class:`SnapshotSource` declares everything the monitor asks of a source.  Its
optional capabilities come with defaults, so a source that lacks one inherits
what that means: no recorded time of its own, no use for the pids on screen, no
replay progress.  A source derives from it (the live source, the first-sample
source, ``serve``'s host-only source); the replay source, in ``recording/``
below this room, declares the same members itself and is held to them by mypy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # the snapshot model loads with the collectors, after NVML opens
    from gputui.host.in_view import InView
    from gputui.recording.replay import ReplayProgress
    from gputui.snapshot.model import Snapshot


class SnapshotSource(Protocol):
    """Anything that yields whole snapshots."""

    #: shown to the user: "live", "recording: FILE", "DEMO: recording of ..."
    label: str
    #: True when the data is a recording, not this machine now
    is_recording: bool = False
    #: the natural time between snapshots (a recording's own cadence), or None
    natural_interval_s: float | None = None

    @property
    def recorded_at_s(self) -> float | None:
        """The time the last snapshot describes, when it is not the snapshot's own
        ``timestamp_s``; None: the snapshot's."""
        return None

    def use_view(self, in_view: InView) -> None:
        """Which processes are on screen, for a source that reads those more often
        (called once, after the first sample).  By default: not used."""
        return None

    def progress(self) -> ReplayProgress | None:
        """Where a replay is (read right after each sample); None: not a replay."""
        return None

    def sample(self) -> Snapshot: ...

    def close(self) -> None: ...
