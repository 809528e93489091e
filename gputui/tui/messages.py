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
    from gputui.cluster.view import ClusterSnapshot
    from gputui.session.monitor import Reading


class _Newest(Message):
    """A message that a newer one of its class replaces while it waits."""

    def can_replace(self, message: Message) -> bool:
        return type(message) is type(self)


class SnapshotReady(_Newest):
    """A reading from the monitor's poller (an app whose inbox is not open yet)."""

    def __init__(self, reading: Reading) -> None:
        super().__init__()
        self.reading = reading


class _Failed(Message):
    """A thread's work failed: ``error`` says why, as one line."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class PollFailed(_Failed, _Newest):
    """The monitor poller's last sample failed (an app whose inbox is not open)."""


class ClusterReady(_Newest):
    """The cluster source's newest snapshot."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class ClusterFailed(_Failed):
    """A refresh of the cluster failed (each one is said)."""


class CaptureArrived(Message):
    """A capture result reached the attach state (posted from the reader thread)."""
