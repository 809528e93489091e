"""Every message a thread posts to an app: the poller's, the cluster's reader's,
the attach feed's.  (Messages a widget posts to its screen live with the widget.)

``post_message`` is thread-safe; a message that a newer one of its class may
replace while it waits (``can_replace``) keeps a slow terminal on the newest
data, never a backlog.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:
    from collections.abc import Mapping

    from gputui.ceilings.measured import Ceilings
    from gputui.cluster.view import ClusterSnapshot
    from gputui.recording.replay import ReplayProgress
    from gputui.snapshot.model import Snapshot


class _Newest(Message):
    """A message that a newer one of its class replaces while it waits."""

    def can_replace(self, message: Message) -> bool:
        return type(message) is type(self)


class SnapshotReady(_Newest):
    """A new snapshot from the monitor's poller."""

    def __init__(
        self,
        snapshot: Snapshot,
        recorded_at_s: float | None,
        replay: ReplayProgress | None = None,
        ceilings: Mapping[str, Ceilings] | None = None,
    ) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.recorded_at_s = recorded_at_s
        self.replay = replay
        self.ceilings = ceilings


class PollFailed(_Newest):
    """The monitor poller's last sample failed."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class ClusterReady(_Newest):
    """The cluster source's newest snapshot."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class ClusterFailed(Message):
    """A refresh of the cluster failed (each one is said)."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class CaptureArrived(Message):
    """A capture result reached the attach state (posted from the reader thread)."""
