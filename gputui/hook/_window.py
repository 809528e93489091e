"""What the hook's capture and memory snapshot controllers share: each runs a
viewer's request over a window of steps, from the training thread's step
boundaries, and hands its result to the I/O thread from a worker."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from gputui.hook._recorder import Recorder

#: (viewer id or None for all, message object): how the controller reaches viewers
Post = Callable[[int | None, dict[str, Any]], None]


class WindowController:
    """A request's state over its window of steps: who asked (``requester``), the
    state (None: idle), the steps recorded from ``first_step``, when it started,
    and the results sent so far (``count``, the last one)."""

    def __init__(self, recorder: Recorder, post: Post) -> None:
        self.recorder = recorder
        self.post = post
        self.state: str | None = None
        self.requester: int | None = None  # viewer id
        self.recorded = 0
        self.first_step: int | None = None
        self.started_wall = 0.0
        self.last_result: dict[str, Any] | None = None
        self.count = 0

    def viewer_gone(self, vid: int) -> None:
        if self.requester == vid:
            self.requester = None  # the result is still broadcast to the others

    def _sent(self, result: dict[str, Any]) -> None:
        """The worker's result is made (sent next): the controller is idle again."""
        self.count += 1
        self.last_result = result
        self.state = None
        self.requester = None


def file_stem(meta: dict[str, Any]) -> str:
    """A window's file name before its suffix: the job's pid, the time, its steps."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return f"{os.getpid()}-{stamp}-steps{meta['first_step']}-{meta['last_step']}"
